"""Process topologies beyond 2 ranks on one launcher: 4 ranks whose unused sets all differ
in the same iteration; two torchrun agents as two nodes; a torchrun restart with resume."""
import os

import pytest

from tests.dist_utils import run_distributed
from tests.equivalence import assert_trains_like_graph_search
from tests.scenarios import train_guarded_and_reference


@pytest.mark.timeout(300)
@pytest.mark.skipif(os.environ.get('DDP_GUARD_TEST_WORLD_SIZE', '4') != '4',
                    reason='DDP_GUARD_TEST_WORLD_SIZE forces another world size; this '
                    'test is about 4 ranks')
def test_four_ranks_with_four_different_unused_sets():
    results = run_distributed(train_guarded_and_reference, pattern='one_gate_per_rank',
                              optimizer='sgd', world_size=4)
    assert len(results) == 4
    assert_trains_like_graph_search(results)
    for per_rank in results[0]['guarded']['usage']:
        assert len({tuple(names) for names in per_rank}) == 4, per_rank
