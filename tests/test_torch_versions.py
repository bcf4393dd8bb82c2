"""The supported versions (checked at import), the AccumulateGrad-node path that torch < 2.1
records usage with, and DDP's graph search under gradient accumulation before torch 2.4
(pytorch/pytorch#69031). Runs in every environment of the version matrix
(tools/version_matrix.sh): each branch below that depends on the torch at hand is real there.
"""
import importlib.util
import inspect
import re
import warnings
from types import SimpleNamespace

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard.environment import ddp_compat
from mmdet3d_ddp_guard.guard import accumulate_grad_hooks, step_backwards
from mmdet3d_ddp_guard.environment.framework_table import MMENGINE_LINES
from mmdet3d_ddp_guard.guard.decision_policy import COMPLETE, FIND_UNUSED, initial_decision
from mmdet3d_ddp_guard.messages.mode_request import CONFIG_TOP_LEVEL
from mmdet3d_ddp_guard.guard.step_backwards import StepBackwards, StepErrorTexts
from mmdet3d_ddp_guard.guard.usage_record import ParamUsageRecord
from mmdet3d_ddp_guard.environment.framework_table import MMCV1, MMENGINE, framework
from mmdet3d_ddp_guard.environment.versions import (check_framework, check_torch,
                                                    graph_search_accumulates_right)
from tests.dist_utils import DistributedRunError, run_distributed
from tests.equivalence import assert_trains_like_graph_search
from tests.scenarios import (GLOO_REDUCES_BFLOAT16, GRAPH_SEARCH_TRAINS_LOGGED_OUTPUTS,
                             train_guarded_and_reference, train_manual_reference, train_toy,
                             train_toy_runner)

OLD_GRAPH_SEARCH = not graph_search_accumulates_right(torch.__version__)


def _package(name: str, version: str):
    """What an adapter hands check_framework: the framework's imported package (here its
    three attributes that the check reads, as a vendored copy would have them)."""
    return SimpleNamespace(__name__=name, __version__=version,
                                 __file__=f'/vendored/{name}/__init__.py')


@pytest.mark.parametrize('torch_version', ['1.9.1', '1.10.2+cu113', '1.12.1', '1.13.1',
                                           '2.1.2+cu121', '2.13.0+cpu', '2.14.1'])
def test_supported_versions_pass_quietly(torch_version):
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        check_torch(torch_version, (3, 8))
        check_framework(framework(MMENGINE), _package('mmengine', '0.8.0'))
        check_framework(framework(MMCV1), _package('mmcv', '1.4.0'))


def test_unsupported_versions_are_refused_naming_the_range_and_the_fix():
    with pytest.raises(RuntimeError, match=r'supports torch >= 1\.9 .*1\.8\.1.*last gradient '
                                           r'bucket.*torch==1\.9\.1.*'
                                           'find_unused_parameters = True'):
        check_torch('1.8.1+cu111')
    with pytest.raises(RuntimeError, match=r"mmengine >= 0\.8.*0\.7\.4.*pip install.*"
                                           r"imports 'mmengine' from /vendored/mmengine"):
        check_framework(framework(MMENGINE), _package('mmengine', '0.7.4'))
    with pytest.raises(RuntimeError, match=r"mmcv-full >= 1\.4 .*1\.3\.17.*mmcv-full==1\.4\.0"):
        check_framework(framework(MMCV1), _package('mmcv', '1.3.17'))
    with pytest.raises(RuntimeError, match=r'Python >= 3\.8'):
        check_torch('2.1.2', (3, 7))


def test_a_newer_torch_than_tested_gets_a_warning_not_a_refusal():
    with pytest.warns(UserWarning, match=r'tested up to torch 2\.14; torch 2\.15\.0 is newer'):
        check_torch('2.15.0')


def test_ddp_surface_gates_pick_what_this_torch_offers():
    """ddp_compat's version gates, against the torch at hand: each accessor it picks exists,
    and DDP takes static_graph as an argument exactly where the gate says."""
    bucket = torch.distributed.GradBucket
    if ddp_compat.NEW_GRAD_BUCKET_API:
        assert hasattr(bucket, 'buffer') and hasattr(bucket, 'is_last')
    else:
        assert hasattr(bucket, 'get_tensor') and hasattr(bucket, 'is_the_last_bucket_to_allreduce')
        assert not hasattr(bucket, 'is_last')
    ddp_arguments = inspect.signature(DistributedDataParallel.__init__).parameters
    assert ('static_graph' in ddp_arguments) == ddp_compat.STATIC_GRAPH_ARGUMENT
    # torch 1.10's DDP joins through the generic Join, whose joined rank runs the comm hook.
    assert (importlib.util.find_spec('torch.distributed.algorithms.join') is not None) \
        == ddp_compat.JOIN_THROUGH_COMM_HOOK
    if not ddp_compat.STATIC_GRAPH_ARGUMENT:
        assert hasattr(DistributedDataParallel, '_set_static_graph')


def _broadcast_bfloat16(rank, world_size):
    torch.distributed.broadcast(torch.ones(2, dtype=torch.bfloat16), src=0)


def test_gloo_bfloat16_gate_that_skips_the_bfloat16_cases_is_this_torchs():
    if GLOO_REDUCES_BFLOAT16:
        run_distributed(_broadcast_bfloat16, timeout=120)
    else:
        with pytest.raises(DistributedRunError, match='Invalid scalar type'):
            run_distributed(_broadcast_bfloat16, timeout=120)


def test_the_default_hook_is_the_node_wherever_the_tensor_hook_misses_undefined_grads():
    """torch 2.1.2's tensor hook does not fire for an undefined gradient (measured); the
    record then takes the node path, which does."""
    probe = accumulate_grad_hooks.tensor_hook_sees_undefined_grads()
    if accumulate_grad_hooks.POST_ACCUMULATE_GRAD_HOOK:
        assert probe == (torch.__version__.split('+')[0] != '2.1.2')
    assert accumulate_grad_hooks.hooks_nodes() == (not probe)


def test_node_hook_sees_reached_undefined_and_unreached_parameters():
    """The torch < 2.1 path, forced on any torch: the hook fires after accumulation, with
    the gradient in place, and also for an undefined gradient; an unreached parameter gets
    no call; remove() detaches it."""

    class NoGrad(torch.autograd.Function):

        @staticmethod
        def forward(ctx, x, weight):
            return x * weight

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    used, undefined, unreached = (torch.nn.Parameter(torch.ones(2)) for _ in range(3))
    seen = []
    handles = [accumulate_grad_hooks.register_grad_accumulated_hook(
        p, lambda p, name=name: seen.append((name, p.grad is not None)), use_node=True)
        for name, p in (('used', used), ('undefined', undefined), ('unreached', unreached))]
    x = torch.ones(2, requires_grad=True)
    (used * 2 + NoGrad.apply(x, undefined)).sum().backward()
    assert sorted(seen) == [('undefined', False), ('used', True)]
    for handle in handles:
        handle.remove()
    (used * 2).sum().backward()
    assert len(seen) == 2


def _backward_ends_seen_by_step_backwards(rank, world_size):
    """A branch only rank 0 runs; ``ended`` completes it (as the mmcv 1.x adapter's settling
    does) and keeps what the gradients are at that moment."""
    torch.manual_seed(0)
    model = torch.nn.ModuleDict(dict(trunk=torch.nn.Linear(4, 4), branch=torch.nn.Linear(4, 4)))
    record = ParamUsageRecord(model)
    ddp = DistributedDataParallel(model)
    params = list(model.parameters())
    calls, grads = [], []

    class Wrapper:
        """The guarded wrapper's part that StepBackwards calls, with a stand-in settling."""
        usage_record, module = record, model

        def enter_backward(self):
            calls.append('started')

        def settle_after_backward(self, reduces, iteration):
            return ended()

    def ended():
        calls.append('ended')
        unreached = [params[i] for i in record.local_unreached()]
        if unreached:
            torch.autograd.backward(unreached, [torch.zeros_like(p) for p in unreached])
        grads.append([p.grad.clone() for p in params])
        return unreached

    never = '{model}{param}{hook}: not expected'
    backwards = StepBackwards(Wrapper(), StepErrorTexts(never, never, never, never),
                              waits_for_outputs=True)

    class Forward(torch.nn.Module):
        def forward(self, x):
            out = model['trunk'](x)
            return model['branch'](out) if rank == 0 else out
    ddp.module.forward = Forward().forward
    for _ in range(3):
        backwards.begin_step(0, 'the optimizer hook')
        record.start_iteration()
        ddp.zero_grad()
        loss = ddp(torch.full((2, 4), rank + 1.0)).sum()
        backwards.expect_backwards([loss], reduces=True)
        torch.autograd.backward(loss)
    return dict(calls=calls, grads=grads)


@pytest.mark.timeout(120)
def test_a_step_s_backward_ends_after_ddp_s_own_finalisation():
    """The mmcv 1.x adapter settles from :class:`StepBackwards` (autograd's final callback,
    a private API): ``ended`` runs once per step, after DDP copied the averaged gradients
    back (equal on both ranks), and the completion it runs there fires no second call."""
    results = run_distributed(_backward_ends_seen_by_step_backwards)
    for result in results:
        assert result['calls'] == ['started', 'ended'] * 3
    for step_0, step_1 in zip(results[0]['grads'], results[1]['grads']):
        for grad_0, grad_1 in zip(step_0, step_1):
            assert torch.equal(grad_0, grad_1)


def test_a_torch_without_autograd_s_final_callbacks_is_refused_clearly(monkeypatch):
    record = ParamUsageRecord(torch.nn.Linear(2, 2))
    monkeypatch.setattr(torch.autograd.Variable, '_execution_engine', object())
    with pytest.raises(RuntimeError, match=rf'torch {re.escape(torch.__version__)} has no '
                                           r'torch.autograd.Variable._execution_engine'):
        StepBackwards(SimpleNamespace(usage_record=record), None, waits_for_outputs=False)


def test_a_torch_whose_function_backwards_cannot_be_told_is_refused_clearly(monkeypatch):
    record = ParamUsageRecord(torch.nn.Linear(2, 2))
    monkeypatch.setattr(step_backwards, '_FUNCTION_BACKWARD', None)
    with pytest.raises(RuntimeError, match=r'has no torch\.autograd\.function\.'
                                           r'BackwardCFunction\.apply, which the guard needs'):
        StepBackwards(SimpleNamespace(usage_record=record), None, waits_for_outputs=False)


@pytest.mark.timeout(300)
@pytest.mark.parametrize('case', [
    dict(pattern='rank_dependent'),
    dict(pattern='rank_dependent', wrapper_kwargs=dict(bucket_cap_mb=1e-4)),
    dict(pattern='undefined_grad_rank_dependent'),
    dict(pattern='rank_dependent', accumulative_counts=2, steps=8),
], ids=['rank_dependent', 'many_buckets', 'undefined_grad', 'accumulation'])
def test_guarded_ddp_on_accumulate_grad_nodes_trains_like_the_graph_search(case):
    """The record's hooks on the AccumulateGrad nodes, added before DDP's own: the usage each
    rank put on DDP's last bucket is exact (a hook running after DDP's would miss the
    parameter that launched the bucket), and training equals the graph search's."""
    results = run_distributed(train_guarded_and_reference, optimizer='sgd', node_hooks=True,
                              **case)
    assert_trains_like_graph_search(results)


def test_find_unused_with_accumulation_before_torch_2_4_becomes_complete_loudly():
    decision = initial_decision(True, CONFIG_TOP_LEVEL, False, MMENGINE_LINES,
                                accumulative_counts=2, torch_version='2.1.2')
    assert decision.mode == COMPLETE and decision.warning
    assert 'pytorch/pytorch#69031' in decision.reason and 'accumulative_counts=2' in \
        decision.reason and "find_unused_parameters='auto'" in decision.reason
    for counts, version in ((1, '2.1.2'), (2, '2.4.0')):
        decision = initial_decision(True, CONFIG_TOP_LEVEL, False, MMENGINE_LINES,
                                    accumulative_counts=counts, torch_version=version)
        assert decision.mode == FIND_UNUSED and not decision.warning


def _graph_search_and_manual_reference(rank, world_size):
    # The branch runs in the first micro-step of every window and in no rank's last one.
    case = dict(pattern='skip_odd', optimizer='sgd', steps=8, accumulative_counts=2)
    return dict(ddp=train_toy(rank, world_size, 'ddp_find_unused', **case),
                manual=train_manual_reference(rank, world_size, **case))


@pytest.mark.timeout(300)
def test_ddp_graph_search_trains_accumulation_wrong_exactly_before_torch_2_4():
    """pytorch/pytorch#69031 on the torch at hand, against the independent reference that
    GuardedDDP is compared with: the version gate in versions.py is the real boundary."""
    for result in run_distributed(_graph_search_and_manual_reference):
        worst = max((result['ddp']['params'][name] - value).abs().max().item()
                    for name, value in result['manual']['params'].items())
        if OLD_GRAPH_SEARCH:
            assert worst > 1e-4, f'torch {torch.__version__}: #69031 did not show'
        else:
            assert worst < 1e-6


@pytest.mark.timeout(300)
def test_runner_config_with_find_unused_and_accumulation(tmp_path):
    """What a user of an inherited ``find_unused_parameters = True`` gets with
    ``accumulative_counts=2``: before torch 2.4 GuardedDDP trains it with 'complete' (and
    says why); from 2.4 on, DDP's graph search, as written."""
    results = run_distributed(
        train_toy_runner, str(tmp_path), 'rank_dependent', dict(type='GuardedDDP'),
        find_unused_parameters=True,
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9),
                           accumulative_counts=2))
    for result in results:
        assert result['decision'] == (COMPLETE if OLD_GRAPH_SEARCH else FIND_UNUSED)


def _graph_search_on_a_logged_output(rank, world_size):
    return train_toy(rank, world_size, 'ddp_find_unused', 'output_logged_not_in_loss', 'sgd',
                     steps=3)['params']


@pytest.mark.timeout(300)
def test_ddp_graph_search_fails_on_a_logged_output_exactly_on_torch_1_9():
    """The gate in scenarios.py on the torch at hand: where DDP's graph search dies of an
    output that the forward returns but the loss leaves out, GuardedDDP is compared with
    the single-process computation instead (test_guarded_ddp_training.py trains it)."""
    if GRAPH_SEARCH_TRAINS_LOGGED_OUTPUTS:
        run_distributed(_graph_search_on_a_logged_output)
    else:
        with pytest.raises(DistributedRunError, match='Expected to have finished reduction'):
            run_distributed(_graph_search_on_a_logged_output)


def _python_built_graph_search_with_accumulation(rank, world_size):
    return train_toy(rank, world_size, 'guarded', 'rank_dependent', 'sgd', steps=4,
                     accumulative_counts=2,
                     wrapper_kwargs=dict(find_unused_parameters=True))['decision']


@pytest.mark.timeout(300)
def test_python_built_graph_search_refuses_accumulation_before_torch_2_4():
    if OLD_GRAPH_SEARCH:
        with pytest.raises(DistributedRunError, match=r'pytorch/pytorch#69031.*'
                                                      "find_unused_parameters='auto'"):
            run_distributed(_python_built_graph_search_with_accumulation)
    else:
        assert run_distributed(_python_built_graph_search_with_accumulation) == \
            [FIND_UNUSED] * 2



@pytest.mark.timeout(300)
def test_hook_warns_about_the_graph_search_with_accumulation_before_torch_2_4(tmp_path):
    """The folk remedy without GuardedDDP: DDP's own find_unused_parameters=True with
    accumulative_counts=2. The hook says so in the log before torch 2.4, and not after."""
    run_distributed(
        train_toy_runner, str(tmp_path), 'rank_dependent',
        dict(type='CPUCompatibleMMDDP', find_unused_parameters=True),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.05), accumulative_counts=2))
    logs = ''.join(path.read_text() for path in tmp_path.rglob('*.log'))
    assert 'UnusedParamsHook' in logs
    assert ('pytorch/pytorch#69031' in logs) == OLD_GRAPH_SEARCH
