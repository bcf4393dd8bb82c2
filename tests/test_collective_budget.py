"""The fast path's promise, held as a property rather than a timing: on a rank that used
every parameter GuardedDDP adds no collective of its own, and the per-rank detail costs a
collective only in iterations whose ranks disagree; the stall guard, running, touches the
c10d store in no iteration while nothing stalls (with a stall timeout of 1 s, over at least
10 s of training, so that a watchdog that judged a healthy run would be caught)."""
import pytest

from tests.dist_utils import run_distributed
from tests.scenarios import collectives_beyond_ddp_buckets


@pytest.mark.timeout(200)
@pytest.mark.parametrize('pattern, expected', [
    # Nothing unused: only DDP's bucket all-reduces, which carry the counts.
    ('none', 0),
    # The same parameters unused on every rank (mmdet3d's SMOKE leaves six so every
    # iteration): the counts say "every rank", so no rank identities are needed.
    ('dead_layer', 0),
    # Ranks disagree every iteration: one small all_gather learns which ranks.
    ('rank_dependent', 1),
])
def test_collectives_of_our_own_per_iteration(pattern, expected):
    results = run_distributed(collectives_beyond_ddp_buckets, pattern)
    for rank, extra in enumerate(results):
        # (our collectives, store keys added, the stall watchdog's store operations)
        assert extra == [(expected, 0, 0)] * len(extra), f'rank {rank}: {extra}'

