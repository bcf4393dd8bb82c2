"""What torch's own DDP tests (:mod:`tests.pytorch.torch_ddp_suite`) do on a CPU with
GuardedDDP in DDP's place, per torch release validated: which of them run here (the others
need CUDA and skip), which fail and why, and which build no DDP though named for it.

:mod:`tests.pytorch.test_torch_ddp_suite` fails when a test listed here to fail passes, when
one not listed fails, when a listed one no longer runs on a CPU, and, in the full run, when
one not listed starts to run on a CPU: the lists cannot rot.
"""
from typing import Dict, NamedTuple, Optional, Tuple


class Expected(NamedTuple):
    #: The tests (``Suite.test_name``) that run on a CPU, every other selected one skipping.
    runs: Tuple[str, ...]
    #: test -> (why it fails, a regular expression its error matches).
    fails: Dict[str, Tuple[str, str]]
    #: test -> why it passes without building a DDP (named for DDP, or a reference run).
    builds_none: Dict[str, str]


_DIST_TEST = 'DistributedTest.'
_UNDER_RPC = 'DdpUnderDistAutogradTest.'
_COMPARISON = 'DdpComparisonTest.'

#: What runs on a CPU on every torch validated; below, what passes there without a DDP.
_RUN_ON_EVERY_TORCH = tuple(_DIST_TEST + name for name in (
    'test_DistributedDataParallelCPU', 'test_DistributedDataParallelCPU_grad_is_view',
    'test_DistributedDataParallel_requires_grad', 'test_accumulate_gradients_no_sync',
    'test_accumulate_gradients_no_sync_allreduce_hook',
    'test_accumulate_gradients_no_sync_allreduce_with_then_hook',
    'test_accumulate_gradients_no_sync_grad_is_view', 'test_ddp_logging_data_cpu',
    'test_dump_DDP_relevant_env_vars', 'test_static_graph_api_cpu',
)) + tuple(_UNDER_RPC + name for name in (
    'test_backward_ddp_inside', 'test_backward_ddp_outside',
    'test_backward_ddp_outside_uneven_inputs', 'test_backward_no_ddp',
)) + tuple(_COMPARISON + name for name in (
    'test_ddp_comparison', 'test_ddp_comparison_uneven_inputs',
    'test_ddp_dist_autograd_local_vs_remote', 'test_ddp_dist_autograd_sparse_grads',
))
_BUILD_NONE_ON_EVERY_TORCH = {
    _DIST_TEST + 'test_dump_DDP_relevant_env_vars': 'prints the DDP environment variables',
    _UNDER_RPC + 'test_backward_no_ddp': 'the reference run without DDP',
}

_TORCH_2 = Expected(
    runs=_RUN_ON_EVERY_TORCH + tuple(_DIST_TEST + name for name in (
        'test_ddp_create_graph', 'test_grads_same_across_ranks_with_no_sync')),
    fails={},
    builds_none=_BUILD_NONE_ON_EVERY_TORCH,
)

# torch 1.9: join() all-reduces a joined rank's zeros without DDP's comm hook, which the
# guard's counts ride (docs/pytorch.md, Limits): the rank that joins stops with the fix.
_JOIN_ON_TORCH_1_9 = ('a rank that joins (uneven inputs) needs torch >= 1.10 under the guard '
                      "(docs/pytorch.md, Limits); it stops with GuardedDDP's error and the fix",
                      r'join\(\) \(uneven inputs\) under the guard needs torch >= 1\.10')
_TORCH_1_9 = Expected(
    runs=_RUN_ON_EVERY_TORCH + (_DIST_TEST + 'test_ddp_model_diff_across_ranks', ),
    fails={
        _UNDER_RPC + 'test_backward_ddp_outside_uneven_inputs': _JOIN_ON_TORCH_1_9,
        _COMPARISON + 'test_ddp_comparison_uneven_inputs': _JOIN_ON_TORCH_1_9,
    },
    builds_none=dict(_BUILD_NONE_ON_EVERY_TORCH, **{
        _DIST_TEST + 'test_ddp_model_diff_across_ranks':
            "torch 1.9 skips its ranks' exit-code check (skip_return_code_checks), so its "
            'skip for want of 2 GPUs reads as a pass',
    }),
)

#: The torch releases (major.minor) whose outcomes were measured: the legs that run
#: tests/pytorch (torch1.9, pytorch and the suite on 2.13, torch2.14).
VALIDATED = {'1.9': _TORCH_1_9, '2.13': _TORCH_2, '2.14': _TORCH_2}


def expected_for(torch_version: str) -> Optional[Expected]:
    """The outcomes measured on ``torch_version``'s release; None where none were."""
    return VALIDATED.get('.'.join(torch_version.split('.')[:2]))
