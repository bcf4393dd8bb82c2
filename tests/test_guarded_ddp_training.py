"""GuardedDDP('auto') on 2 gloo ranks: never fails or hangs, and trains exactly as DDP's
graph search (find_unused_parameters=True) does, for each pattern of unused parameters."""
import pytest
import torch

from tests.dist_utils import run_distributed
from tests.equivalence import assert_trains_like_graph_search
from tests.scenarios import CPU_GRAD_SCALER, GLOO_REDUCES_BFLOAT16, train_guarded_and_reference

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
    # DDP's graph search fails this on torch 1.9 (test_torch_versions.py); GuardedDDP is
    # compared with the single-process computation there.
    'output_logged_but_left_out_of_loss': dict(pattern='output_logged_not_in_loss'),
    'accumulation_branch_unused_in_some_micro_steps':
        dict(pattern='rank_dependent', accumulative_counts=2, steps=8),
    'amp_optim_wrapper': dict(pattern='skip_odd', amp=True),
    # A custom Function returns None for a weight: autograd reaches it, its gradient stays
    # undefined. DDP's graph search treats it as unused; so must we (PyTorch's
    # test_undefined_grad_parity_unused_parameters).
    'undefined_gradient_on_every_rank': dict(pattern='undefined_grad'),
    'undefined_gradient_on_one_rank_defined_on_the_other':
        dict(pattern='undefined_grad_rank_dependent'),
    # bfloat16 buckets carry the counts exactly up to 256 ranks; past that (forced here)
    # they travel in a float32 all-reduce of their own.
    'bfloat16_parameters': dict(pattern='rank_dependent', dtype=torch.bfloat16),
    'counts_beyond_what_the_bucket_dtype_holds':
        dict(pattern='rank_dependent', dtype=torch.bfloat16, separate_counts=True),
}


_NEEDS_BFLOAT16_REDUCE = pytest.mark.skipif(
    not GLOO_REDUCES_BFLOAT16 and not torch.cuda.is_available(),
    reason=f"gloo on torch {torch.__version__} cannot reduce bfloat16 ('Invalid scalar type')")
#: The cases that an old torch cannot run on the CPU at all.
CASE_MARKS = {
    'amp_optim_wrapper': pytest.mark.skipif(
        not CPU_GRAD_SCALER and not torch.cuda.is_available(),
        reason=f'torch {torch.__version__} has no CPU GradScaler for AmpOptimWrapper'),
    'bfloat16_parameters': _NEEDS_BFLOAT16_REDUCE,
    'counts_beyond_what_the_bucket_dtype_holds': _NEEDS_BFLOAT16_REDUCE,
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize('optimizer', ['sgd', 'adamw'])
@pytest.mark.parametrize('case', [pytest.param(CASES[name], id=name,
                                               marks=CASE_MARKS.get(name, ()))
                                  for name in sorted(CASES)])
def test_trains_like_find_unused_parameters(case, optimizer):
    results = run_distributed(train_guarded_and_reference, optimizer=optimizer, **case)
    assert_trains_like_graph_search(results)


@pytest.mark.timeout(300)
def test_globally_unused_parameter_is_skipped_by_the_optimizer():
    results = run_distributed(train_guarded_and_reference, pattern='dead_layer',
                              optimizer='sgd', steps=3)
    state = results[0]['guarded']['optimizer_state']['state']
    # Parameter order: stem.w, stem.b, branch.w, branch.b, dead.w, dead.b, ...
    assert 4 not in state and 5 not in state, 'dead layer got a momentum buffer'
    assert 0 in state


@pytest.mark.timeout(300)
def test_weight_whose_gradient_no_rank_defined_is_left_alone():
    """The issue's reproduction: SGD(momentum=0.9, weight_decay) over 3 steps must leave a
    weight whose gradient is undefined on every rank exactly where it was, without state."""
    results = run_distributed(train_guarded_and_reference, pattern='undefined_grad',
                              optimizer='sgd', steps=3)
    for result in results:
        # The reference is DDP's graph search from torch 1.10 on; on 1.9, which moves the
        # weight, the single-process computation (scenarios.graph_search_is_wrong).
        for run in ('guarded', 'reference'):
            assert torch.equal(result[run]['params']['gate'], torch.ones(16)), run
        gate_index = list(result['guarded']['params']).index('gate')
        assert gate_index not in result['guarded']['optimizer_state']['state']
