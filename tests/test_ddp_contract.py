"""GuardedDDP is a DDP: each case of the DDP contract (tests/ddp_contract.py) trains under
the guard and under its framework's own wrapper in the same 2-rank gloo launch, and every
rank's weights, buffers and optimizer state (an EMA copy's weights and output, val outputs,
parameter names and state_dict keys) are the own wrapper's, bit for bit.

The same module runs against each adapter installed here: MMEngine's ``GuardedDDP`` on the
pinned stack and the torch legs, mmcv 1.x's guarded ``MMDistributedDataParallel`` in the
openmmlab1 leg. One launch per adapter trains every case, one after the other.
"""
import pytest
import torch

from mmdet3d_ddp_guard.environment.frameworks import installed_frameworks
from tests.ddp_contract import CASES, train_every_case
from tests.dist_utils import run_distributed

pytestmark = pytest.mark.timeout(300)

ADAPTERS = [name for name, framework in (('mmengine', 'mmengine'), ('mmcv', 'mmcv-full'),
                                         ('pytorch', 'torch'))
            if framework in installed_frameworks()]
#: Where a copy of the guard has its own stall guard: never (one per process, the
#: original's).
WATCHDOGS = {
    'deepcopy_for_ema': dict(trained=True, ema=False),
    'pickle_then_train_the_copy': dict(trained=False, original=True),
}


@pytest.fixture(scope='module', params=ADAPTERS)
def trained(request):
    return request.param, run_distributed(train_every_case, request.param, timeout=240)


def _assert_same(actual, expected, where):
    if isinstance(expected, dict):
        assert list(actual) == list(expected), where
        for key in expected:
            _assert_same(actual[key], expected[key], f'{where}.{key}')
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for index, (a, e) in enumerate(zip(actual, expected)):
            _assert_same(a, e, f'{where}[{index}]')
    elif isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, where
        assert torch.equal(actual, expected), where
    else:
        assert actual == expected, where


@pytest.mark.parametrize('case', list(CASES))
def test_the_guard_handles_and_trains_as_the_framework_s_own_wrapper(trained, case):
    adapter, results = trained
    for rank, result in enumerate(results):
        own, guarded = result[(case, False)], result[(case, True)]
        assert 'error' not in own, f'{adapter} rank {rank}: own wrapper: {own["error"]}'
        assert 'error' not in guarded, f'{adapter} rank {rank}: guarded: {guarded["error"]}'
        watchdogs = guarded.pop('watchdogs')
        assert watchdogs == WATCHDOGS.get(case, dict(trained=True)), (adapter, rank)
        for kind in ('weights', 'buffers', 'optimizer', 'names', 'state_dict_keys', 'val',
                     'ema', 'ema_output'):
            assert (kind in guarded) == (kind in own), kind
            if kind in own:
                _assert_same(guarded[kind], own[kind], f'{adapter} {case} rank {rank} {kind}')
        if 'ema' in own:
            assert guarded['ema_class'] == guarded['wrapper_class'], 'a copy keeps its class'
    # Every rank holds the same weights (DDP's replicas), while the buffers are each rank's.
    for rank, result in enumerate(results[1:], 1):
        _assert_same(result[(case, True)]['weights'], results[0][(case, True)]['weights'],
                     f'{adapter} {case} rank {rank} weights against rank 0')


@pytest.mark.skipif('mmengine' not in ADAPTERS, reason='needs MMEngine')
def test_mmengine_s_hooks_handle_guarded_ddp_as_the_runner_s_own_wrapper(tmp_path):
    """The README's ``model_wrapper_cfg = dict(type='GuardedDDP')`` against no
    ``model_wrapper_cfg`` (MMEngine's own wrapper, as ``Runner.wrap_model`` builds it),
    with an EMA hook that deep-copies the wrapper, a val loop every 2 iterations, a
    checkpoint resumed (with SyncBuffersHook), and the wrapper saved whole: every rank's
    weights, buffers, optimizer state, EMA, val metrics and saved copy are the same, bit for
    bit."""
    from mmdet3d_ddp_guard.openmmlab2.guarded_ddp import RUNNER_DDP_DEFAULTS
    from tests.ddp_contract_mmengine import train_runner_with_wrapper_hooks
    results = run_distributed(train_runner_with_wrapper_hooks, str(tmp_path), timeout=240)
    for rank, result in enumerate(results):
        for resumed in (False, True):
            own, guarded = result[(False, resumed)], result[(True, resumed)]
            assert guarded['broadcast_buffers'] == own['broadcast_buffers'] \
                == RUNNER_DDP_DEFAULTS['broadcast_buffers']
            assert guarded['saved_class'] == 'GuardedDDP' and not guarded['saved_watchdog']
            assert len(own['val_metrics']) == (1 if resumed else 3)
            for kind in ('weights', 'buffers', 'optimizer', 'ema', 'val_metrics', 'saved'):
                _assert_same(guarded[kind], own[kind], f'rank {rank} resumed={resumed} {kind}')
    # Each rank keeps its own batch norm statistics, as under MMEngine's own wrapper, until
    # SyncBuffersHook averages them.
    statistics = [[result[(True, resumed)]['buffers']['net.norm.running_mean']
                   for result in results] for resumed in (False, True)]
    assert not torch.equal(*statistics[0])
    assert torch.equal(*statistics[1])
