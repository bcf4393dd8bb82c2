"""One step, one way: on 2 gloo ranks, the installed adapter's guarded wrapper (MMEngine's
GuardedDDP on the pinned stack, mmcv 1.x's in the openmmlab1 leg), and the plain PyTorch
adapter's, train with parameters unused on one rank, plainly and with gradient accumulation,
and

- every step makes the guard's calls of ``GuardedWrapper``'s docstring, in its order:
  ``guarded_step(iteration)``, then ``forward_returned()`` (where the previous steps are
  resolved: after this step's forward, before its backward), then ``enter_backward()``,
  then ``settle_after_backward(reduces, iteration)`` with the same iteration, once each;
- no code of the framework-free folders (the guard, the stall guard, the reports) calls a
  function of the adapter's folder while the steps run (a profile of every Python call):
  the adapter passes everything down, the guard calls nothing back;
- no module of the package calls a function of a higher layer's folder (messages <
  environment < stall guard < guard < reports and rank simulation < adapters < commands),
  nor one of a framework's code from a framework-free folder (a logger the adapter handed
  down): the framework is reached through the adapter only. Control comes up only from
  torch (autograd, DDP, a collective) and the framework, which the profile sees as callers
  from outside the package.

- control enters the package only from torch (autograd's and DDP's hooks, a collective), the
  framework (its runner, hooks and optim wrapper, into the adapter; the collectives the stall
  guard records), Python's own machinery and the test.

These hold with the steps run as a test runs them and under the framework's real runner with
the adapter's UnusedParamsHook attached (and a logger hook every 2 iterations), where the
hook pulls the resolved iterations from the wrapper for its report.

A change to one adapter that reorders its step, or a call-back from the guard into an adapter
(an iteration source, a settling or error call-back, an adapter's logging method), fails
here."""
import json
import os.path as osp
import sys

import pytest
import torch

import mmdet3d_ddp_guard
from mmdet3d_ddp_guard.environment.frameworks import installed_frameworks
from tests.dist_utils import run_distributed

ADAPTER = 'mmengine' if 'mmengine' in installed_frameworks() else 'mmcv'
#: The package's folders by layer: a call from a lower layer to a higher one is a call back.
LAYERS = {'messages': 0, 'environment': 1, 'stall_guard': 2, 'guard': 3, 'reporting': 4,
          'rank_simulation': 4, 'openmmlab1': 5, 'openmmlab2': 5, 'pytorch': 5, 'cli': 6}
FRAMEWORK_CODE = tuple(f'{osp.sep}{name}{osp.sep}' for name in ('mmengine', 'mmcv', 'mmdet'))
PACKAGE = osp.dirname(mmdet3d_ddp_guard.__file__)
ADAPTER_FOLDERS = tuple(osp.join(PACKAGE, name) + osp.sep
                        for name in ('openmmlab1', 'openmmlab2', 'pytorch'))
FRAMEWORK_FREE_FOLDERS = tuple(osp.join(PACKAGE, name) + osp.sep
                               for name in ('guard', 'stall_guard', 'reporting', 'messages',
                                            'environment', 'rank_simulation'))
ITERATIONS = 4
TORCH = osp.dirname(torch.__file__) + osp.sep
PYTHON = osp.dirname(osp.__file__) + osp.sep
# The tests' folder: the version matrix's legs run a copy of it beside an installed package.
TESTS = osp.dirname(osp.abspath(__file__)) + osp.sep


def _layer(path: str):
    """The layer of a file of the package's folders; None outside them."""
    if not path.startswith(PACKAGE + osp.sep):
        return None
    return LAYERS.get(osp.relpath(path, PACKAGE).split(osp.sep)[0])


def calls_back_up(caller: str, callee: str) -> bool:
    """Whether a call from the file ``caller`` to the file ``callee`` goes back up: into a
    higher layer of the package, or from a framework-free folder into a framework's code."""
    caller_layer, callee_layer = _layer(caller), _layer(callee)
    if caller_layer is None:
        return False
    if callee_layer is not None:
        return callee_layer > caller_layer
    return caller_layer < LAYERS['openmmlab1'] and any(part in callee
                                                        for part in FRAMEWORK_CODE)


def _caller_kind(path: str) -> str:
    """Who called into the package: torch (autograd's engine, DDP's reducer, a module's
    call), the framework (its runner, hooks, optim wrapper), Python (a context manager's
    ``with``), the test's own steps, or something else."""
    if path.startswith(TORCH):
        return 'torch'
    if any(f'{osp.sep}{name}{osp.sep}' in path for name in ('mmengine', 'mmcv')):
        return 'framework'
    if path.startswith(PYTHON):
        return 'python'
    if path.startswith(TESTS):
        return 'test'
    return path


def _steps_and_crossings(rank: int, world_size: int, case_name: str, work_dir: str = None,
                         adapter_name: str = ADAPTER):
    from mmdet3d_ddp_guard.guard.guarded_wrapper import GuardedWrapper
    from tests.ddp_contract import CASES, ContractNet, contract_batch, load_adapter
    adapter = load_adapter(adapter_name)
    case = CASES[case_name]
    calls = []
    guarded_step = GuardedWrapper.guarded_step
    forward_returned = GuardedWrapper.forward_returned
    enter_backward = GuardedWrapper.enter_backward
    settle_after_backward = GuardedWrapper.settle_after_backward

    def recorded_guarded_step(self, iteration, then=None):
        calls.append(('guarded_step', iteration))
        return guarded_step(self, iteration, then)

    def recorded_forward_returned(self):
        calls.append(('forward_returned', ))
        return forward_returned(self)

    def recorded_enter_backward(self):
        calls.append(('enter_backward', ))
        return enter_backward(self)

    def recorded_settle_after_backward(self, reduces, iteration):
        calls.append(('settle_after_backward', reduces, iteration))
        return settle_after_backward(self, reduces, iteration)

    GuardedWrapper.guarded_step = recorded_guarded_step
    GuardedWrapper.forward_returned = recorded_forward_returned
    GuardedWrapper.enter_backward = recorded_enter_backward
    GuardedWrapper.settle_after_backward = recorded_settle_after_backward
    crossings = set()
    upward = set()
    entries = set()

    def profile(frame, event, arg):
        if event != 'call' or frame.f_back is None:
            return
        callee, caller = frame.f_code, frame.f_back.f_code
        if callee.co_filename.startswith(ADAPTER_FOLDERS) \
                and caller.co_filename.startswith(FRAMEWORK_FREE_FOLDERS):
            crossings.add(f'{osp.relpath(caller.co_filename, PACKAGE)}:{caller.co_name} -> '
                          f'{osp.relpath(callee.co_filename, PACKAGE)}:{callee.co_name}')
        # environment/ddp_compat.py's pass-through (torch 1.x's stand-in for the compiler's
        # untraced wrapper) only forwards torch's call: its caller is the one that calls.
        calling = frame.f_back
        while calling.f_back is not None and calling.f_code.co_name == 'passed_through':
            calling = calling.f_back
        if calls_back_up(calling.f_code.co_filename, callee.co_filename):
            upward.add(f'{osp.relpath(caller.co_filename, PACKAGE)}:{caller.co_name} -> '
                       f'{callee.co_filename}:{callee.co_name}')
        if callee.co_filename.startswith(PACKAGE + osp.sep) \
                and not caller.co_filename.startswith(PACKAGE + osp.sep):
            entries.add((_caller_kind(caller.co_filename),
                         f'{osp.relpath(callee.co_filename, PACKAGE)}:{callee.co_name}'))

    ddp = adapter.wrap(adapter.model(ContractNet()), True, 'auto')
    # In the runner, mmcv's GradientCumulativeOptimizerHook takes the accumulation.
    accumulate = 1 if work_dir and adapter_name == 'mmcv' else case.accumulate
    optimizer = adapter.optimizer(ddp, accumulate, case.momentum)
    batches = [contract_batch(iteration, rank, case) for iteration in range(ITERATIONS)]
    runner = None
    if work_dir is not None:
        options = dict(accumulate=case.accumulate) if adapter_name == 'mmcv' else {}
        runner = adapter.runner_with_report_hook(ddp, optimizer, batches,
                                                 osp.join(work_dir, str(rank)), **options)
    sys.setprofile(profile)
    try:
        if runner is not None:
            adapter.run(runner)
        else:
            for iteration, batch in enumerate(batches):
                adapter.step(ddp, optimizer, batch, iteration, case.accumulate)
    finally:
        sys.setprofile(None)
    if ddp.stall_watchdog is not None:
        ddp.stall_watchdog.stop()
    revised = ddp.decision.iteration is not None
    reported = []
    if runner is not None:  # the report pulled every iteration: rank 0's file holds them
        hook, = (hook for hook in runner.hooks if type(hook).__name__ == 'UnusedParamsHook')
        if rank == 0:
            with open(hook.report.history.path) as lines:
                reported = [json.loads(line)['iter'] for line in lines]
        else:
            reported = list(range(ITERATIONS))
    return dict(calls=calls, crossings=sorted(crossings), revised=revised, reported=reported,
                entries=sorted(entries), upward=sorted(upward))


@pytest.mark.timeout(240)
@pytest.mark.parametrize('case_name', ['rank_dependent_branch', 'no_sync_accumulation'])
@pytest.mark.parametrize('where, adapter', [('steps', ADAPTER),
                                            ('runner_with_report_hook', ADAPTER),
                                            ('steps', 'pytorch')])
def test_every_step_calls_down_in_one_order_and_nothing_calls_back(case_name, where, adapter,
                                                                   tmp_path):
    work_dir = str(tmp_path) if where == 'runner_with_report_hook' else None
    results = run_distributed(_steps_and_crossings, case_name, work_dir, adapter, timeout=180)
    accumulate = 2 if case_name == 'no_sync_accumulation' else 1
    # mmcv's GradientCumulativeOptimizerHook reduces every micro-step (no no_sync).
    reduces_every_step = work_dir is not None and adapter == 'mmcv'
    expected = []
    for iteration in range(ITERATIONS):
        reduces = reduces_every_step or (iteration + 1) % accumulate == 0
        expected += [('guarded_step', iteration), ('forward_returned', ), ('enter_backward', ),
                     ('settle_after_backward', reduces, iteration)]
    for rank, result in enumerate(results):
        assert result['calls'] == expected, (rank, adapter, result['calls'])
        assert result['crossings'] == [], (rank, adapter, result['crossings'])
        assert result['upward'] == [], (rank, adapter, result['upward'])
        # The decision was revised (rank 1 skipped the branch) and logged, through the
        # framework's logging function: the guard logged without calling the adapter.
        assert result['revised'], rank
        if work_dir is not None:
            assert result['reported'] == list(range(ITERATIONS)), (rank, result['reported'])
        # Control enters the package only from torch (autograd's hooks, DDP's comm hook, a
        # collective), the framework, Python's own machinery (a ``with``) and this test; the
        # framework enters the framework-free folders only through the recorded collective
        # functions, everything else through its adapter.
        kinds = {kind for kind, _ in result['entries']}
        assert kinds <= {'torch', 'framework', 'python', 'test'}, result['entries']
        framework_free = {callee for kind, callee in result['entries'] if kind == 'framework'
                          and not callee.startswith(('openmmlab1', 'openmmlab2'))}
        assert framework_free <= {'stall_guard/recording_functions.py:collective'}, \
            result['entries']


def test_the_adapter_s_wrapper_gives_the_guard_every_duty():
    """The installed adapter's wrapper implements the interface of guard/guard_adapter.py;
    a wrapper that leaves a duty out cannot be built, and the error names it."""
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    from mmdet3d_ddp_guard.guard.guard_adapter import GuardAdapter
    from mmdet3d_ddp_guard.guard.guarded_wrapper import GuardedWrapper
    wrapper = (mmdet3d_ddp_guard.GuardedDDP if ADAPTER == 'mmengine'
               else mmdet3d_ddp_guard.GuardedMMDistributedDataParallel)
    assert issubclass(wrapper, GuardAdapter) and not wrapper.__abstractmethods__

    class WithoutLogging(GuardedWrapper, DistributedDataParallel):
        lines = wrapper.lines

        def _adapter_state(self):
            return ()

        def _init_adapter_state(self):
            pass

    with pytest.raises(TypeError, match='log'):
        WithoutLogging(nn.Linear(1, 1))


@pytest.mark.parametrize('caller, callee, back_up', [
    ('guard/completion.py', 'messages/decision_text.py', False),
    ('messages/decision_evidence.py', 'guard/iteration_usage.py', True),
    ('guard/completion.py', 'openmmlab2/guarded_ddp.py', True),
    ('openmmlab2/guarded_ddp.py', 'guard/guarded_wrapper.py', False),
    ('guard/completion.py', '/site-packages/mmengine/logging/logger.py', True),
    ('openmmlab2/guarded_ddp.py', '/site-packages/mmengine/logging/logger.py', False),
    ('/site-packages/torch/autograd/graph.py', 'guard/usage_record.py', False),
])
def test_a_call_back_up_is_told(caller, callee, back_up):
    """At 1b3ca94 the completion logged through a lambda of the wrapper that called the
    framework's print_log, and messages/ called the guard's objects' methods."""
    def path(relative):
        return relative if relative.startswith(osp.sep) else osp.join(PACKAGE, relative)
    assert calls_back_up(path(caller), path(callee)) is back_up
