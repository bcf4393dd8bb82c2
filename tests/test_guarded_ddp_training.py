"""GuardedDDP('auto') on 2 gloo ranks: never fails or hangs, and trains exactly as DDP's
graph search (find_unused_parameters=True) does, for each pattern of unused parameters."""
import pytest

from tests.dist_utils import run_distributed
from tests.equivalence import assert_trains_like_graph_search
from tests.scenarios import train_guarded_and_reference

CASES = {
    'no_unused': dict(pattern='none'),
    'dead_layer': dict(pattern='dead_layer'),
    'branch_skipped_on_odd_iterations': dict(pattern='skip_odd'),
    'unused_set_differs_between_ranks': dict(pattern='rank_dependent'),
    # One parameter per bucket: the ranks that used the branch wait in DDP's all-reduce
    # of its buckets while the others complete them, so no collective may come between.
    'unused_set_differs_between_ranks_many_buckets':
        dict(pattern='rank_dependent', wrapper_kwargs=dict(bucket_cap_mb=1e-4)),
    'output_left_out_of_loss': dict(pattern='output_not_in_loss'),
    'accumulation_branch_unused_in_some_micro_steps':
        dict(pattern='rank_dependent', accumulative_counts=2, steps=8),
    'amp_optim_wrapper': dict(pattern='skip_odd', amp=True),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize('optimizer', ['sgd', 'adamw'])
@pytest.mark.parametrize('case', sorted(CASES))
def test_trains_like_find_unused_parameters(case, optimizer):
    results = run_distributed(train_guarded_and_reference, optimizer=optimizer,
                              **CASES[case])
    assert_trains_like_graph_search(results)


@pytest.mark.timeout(300)
def test_globally_unused_parameter_is_skipped_by_the_optimizer():
    results = run_distributed(train_guarded_and_reference, pattern='dead_layer',
                              optimizer='sgd', steps=3)
    state = results[0]['guarded']['optimizer_state']['state']
    # Parameter order: stem.w, stem.b, branch.w, branch.b, dead.w, dead.b, ...
    assert 4 not in state and 5 not in state, 'dead layer got a momentum buffer'
    assert 0 in state
