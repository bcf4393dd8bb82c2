"""GuardedDDP in a plain PyTorch loop (torch alone: no MMEngine, no mmcv) trains as torch's
``DistributedDataParallel(model, find_unused_parameters=True)``, bit for bit on 2 gloo
ranks, on a detector whose per-scale heads drop out of the loss when their scale has no
target, while ``DistributedDataParallel(model)`` dies on it."""
import importlib.util
import inspect
import subprocess
import sys

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard.pytorch import GuardedDDP
from tests.dist_utils import DistributedRunError, run_distributed
from tests.equivalence import assert_state_equal
from tests.pytorch.loops import (CPU_GRAD_SCALER, STYLES, plain_ddp_steps,
                                 static_graph_beside_the_graph_search, train_side_by_side)
from tests.pytorch.scale_detector import unused_names

pytestmark = pytest.mark.timeout(300)


def test_the_signature_is_the_installed_torch_s_ddp_but_for_auto():
    ours = inspect.signature(GuardedDDP).parameters
    ddp = inspect.signature(DistributedDataParallel).parameters
    assert list(ours)[:len(ddp)] == list(ddp)
    for name, parameter in ddp.items():
        expected = 'auto' if name == 'find_unused_parameters' else parameter.default
        assert ours[name].default == expected, name
        assert ours[name].kind == parameter.kind, name
    # The guard's own option comes after DDP's, by keyword only.
    assert [name for name in ours if name not in ddp] == ['stall_timeout']
    assert ours['stall_timeout'].kind == inspect.Parameter.KEYWORD_ONLY


def test_the_package_imports_with_torch_alone_and_loads_no_framework():
    """Without OpenMMLab (the pytorch leg, where the trainers are installed beside torch),
    neither the package nor its plain adapter loads a framework or a trainer."""
    from mmdet3d_ddp_guard.environment.framework_table import rows_of
    from mmdet3d_ddp_guard.environment.frameworks import installed_frameworks
    if any(row.reads_configs for row in rows_of(installed_frameworks())):
        pytest.skip('an OpenMMLab framework is installed here: the pytorch leg runs this')
    probe = ('import sys, mmdet3d_ddp_guard\n'
             'from mmdet3d_ddp_guard.pytorch import GuardedDDP, UnusedParamsReport\n'
             'print(sorted(m for m in sys.modules if m.split(".")[0] in '
             '("mmengine", "mmcv", "mmdet", "mmdet3d", "lightning", "pytorch_lightning", '
             '"accelerate", "transformers")))\n')
    out = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == '[]'


def assert_trains_as_reference(results):
    """On every rank: GuardedDDP chose 'complete' and ended with the reference's
    parameters, buffers, optimizer state (and the loop's own: GradScaler, EMA), bit for bit,
    having left the same gradients None before each optimizer step."""
    for rank, result in enumerate(results):
        guarded, reference = result['guarded'], result['reference']
        assert result['decision'] == 'complete'
        assert guarded.keys() == reference.keys()
        # The guard reaches the same gradients DDP does, the same None ones too.
        assert guarded['none_grads'] == reference['none_grads'], f'rank {rank}'
        for key in reference:
            assert_state_equal(guarded[key], reference[key], f'rank {rank} {key}')


@pytest.mark.parametrize('accumulate', [1, 2], ids=['every_step', 'no_sync_accumulation'])
def test_trains_as_the_graph_search_on_every_rank(accumulate):
    results = run_distributed(train_side_by_side, accumulate=accumulate)
    assert_trains_as_reference(results)
    # The data made a head unused on every rank once (None, skipped by AdamW), and on one
    # rank only in others; the ranks hold the same weights.
    none_grads = results[0]['reference']['none_grads']
    assert any(none_grads) and not all(none_grads)
    assert_state_equal(results[1]['guarded']['params'], results[0]['guarded']['params'],
                       'rank 1 against rank 0')
    if accumulate == 1:
        assert none_grads[3] == unused_names(0, 3) == unused_names(1, 3)


def test_torch_s_ddp_dies_on_the_same_loop():
    with pytest.raises(DistributedRunError) as error:
        run_distributed(plain_ddp_steps, timeout=120)
    assert 'Expected to have finished reduction in the prior iteration' in str(error.value)


@pytest.mark.parametrize('style', [style for style in STYLES if style != 'plain'])
def test_a_loop_as_users_write_it_trains_as_the_graph_search(style):
    if style == 'amp' and not CPU_GRAD_SCALER:
        pytest.skip(f'torch {torch.__version__} has no CPU GradScaler')
    if style == 'compile' and not hasattr(torch, 'compile'):
        pytest.skip(f'torch {torch.__version__} has no torch.compile')
    if style == 'join' and importlib.util.find_spec('torch.distributed.algorithms.join') is None:
        # torch 1.9's DDP.join all-reduces a joined rank's zeros without the comm hook.
        pytest.skip(f'torch {torch.__version__}: join under a comm hook needs torch >= 1.10')
    results = run_distributed(train_side_by_side, style=style, timeout=240)
    assert_trains_as_reference(results)
    # The loop met unused parameters, on a rank that had not joined.
    assert results[1]['unused_iterations'] > 0


def test_what_static_graph_does_on_the_same_loop():
    """What docs/compatibility.md says of DDP's static_graph=True on this loop, measured:
    eager, it dies at the iteration after the first batch whose used set differs; with
    no_sync accumulation, at the first backward, on an internal assert; compiled, it trains
    to the end without an error, every parameter ending different from the graph search's
    and no gradient ever None (the guard trains the compiled model as the graph search:
    test_a_loop_as_users_write_it_trains_as_the_graph_search[compile])."""
    if not hasattr(torch, 'compile'):
        pytest.skip(f'torch {torch.__version__} has no torch.compile')
    eager = run_distributed(static_graph_beside_the_graph_search, 'plain', 1, False)
    # Rank 1 raises at the forward after iteration 1; rank 0 loses its peer.
    assert eager[1]['steps'] == 2 and eager[1]['error'].startswith(
        'Expected to have finished reduction in the prior iteration')
    accumulated = run_distributed(static_graph_beside_the_graph_search, 'plain', 2, False)
    for result in accumulated:
        assert result['steps'] == 0 and 'INTERNAL ASSERT FAILED' in result['error']
    compiled = run_distributed(static_graph_beside_the_graph_search, 'compile', 1, True)
    for result in compiled:
        assert result['error'] is None and result['steps'] == 6
        assert len(result['differ']) == len(result['params'])
        assert not any(result['none_grads'])
