"""The fast path's promise, held as a property rather than a timing: on a rank that used
every parameter GuardedDDP adds no collective of its own, and the per-rank detail costs a
collective only in iterations whose ranks disagree; the stall guard, running, touches the
c10d store in no iteration while nothing stalls (with a stall timeout of 1 s, over at least
10 s of training, so that a watchdog that judged a healthy run would be caught). One launch
trains every pattern in turn."""
import pytest

from tests.dist_utils import run_distributed
from tests.scenarios import collectives_beyond_ddp_buckets


PATTERNS = {
    # Nothing unused: only DDP's bucket all-reduces, which carry the counts.
    'none': 0,
    # The same parameters unused on every rank (mmdet3d's SMOKE leaves six so every
    # iteration): the counts say "every rank", so no rank identities are needed.
    'dead_layer': 0,
    # Ranks disagree every iteration: one small all_gather learns which ranks.
    'rank_dependent': 1,
}


@pytest.fixture(scope='module')
def extra_per_pattern():
    return run_distributed(collectives_beyond_ddp_buckets, list(PATTERNS))


@pytest.mark.timeout(200)
@pytest.mark.parametrize('pattern', list(PATTERNS))
def test_collectives_of_our_own_per_iteration(extra_per_pattern, pattern):
    expected = PATTERNS[pattern]
    for rank, extra in enumerate(extra_per_pattern):
        # (our collectives, store keys added, the stall watchdog's store operations)
        assert extra[pattern] == [(expected, 0, 0)] * len(extra[pattern]), \
            f'rank {rank}: {extra[pattern]}'
