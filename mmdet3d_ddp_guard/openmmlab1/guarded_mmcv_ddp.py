"""mmcv 1.x's ``MMDistributedDataParallel``, guarded: every one built after the import.

OpenMMLab 1.x has no config line that picks the DDP wrapper: mmdet 2.x's ``train_detector``
(through ``build_ddp``), mmdet3d 1.0.0rc's ``train.py`` and the research codebases' own
``mmdet_train.py`` all call ``mmcv.parallel.MMDistributedDataParallel(...)``, and the
codebases import that name at module top, before the config (and its ``custom_imports``) is
read. So the class itself is guarded, in place: :func:`guard_mmcv_ddp` gives it a
``__new__`` that builds a :class:`GuardedMMDistributedDataParallel` instead, whatever name
the caller holds it by. Subclasses of it that a codebase defines are left alone.
"""
import functools
import sys
import weakref
from typing import Optional

import torch
from mmcv.parallel import MMDistributedDataParallel
from mmcv.runner import BaseRunner, OptimizerHook
from mmcv.utils import Config, print_log

from ..guard.decision_policy import DecisionPolicy
from ..guard.guarded_wrapper import GuardedWrapper
from ..guard.step_backwards import StepBackwards
from ..environment.framework_table import MMCV1_LINES
from ..messages.mode_request import CONFIG_TOP_LEVEL, not_given, read_request
from ..stall_guard import DEFAULT_STALL_TIMEOUT, check_stall_timeout
from .cpu_launch import CPUCompatibleMMDistributedDataParallel, ddp_arguments
from .stall_phase_hook import StallPhaseHook
from .step_errors import MMCV1_STEP_ERRORS

#: The config's own options for the guard: ``ddp_guard = dict(stall_timeout=300)``;
#: ``enabled=False`` builds mmcv's own wrapper, unguarded (to compare, or to turn the guard
#: off without removing the import).
OPTIONS_KEY = 'ddp_guard'
OPTIONS = ('stall_timeout', 'enabled')


class GuardedMMDistributedDataParallel(GuardedWrapper,
                                       CPUCompatibleMMDistributedDataParallel):
    """mmcv 1.x's DDP wrapper, which unused parameters cannot crash or hang.

    The same guard as MMEngine's :class:`~mmdet3d_ddp_guard.GuardedDDP` (read its docstring
    for what an unused parameter is and what each mode costs), reached through the one line
    ``custom_imports = dict(imports=['mmdet3d_ddp_guard'], allow_failed_imports=False)``:
    every ``MMDistributedDataParallel(...)`` the training builds afterwards is one of these.

    **What the config wrote wins; what it did not write is not a choice.** The training
    scripts pass ``find_unused_parameters=cfg.get('find_unused_parameters', False)``, so the
    False they pass when the config is silent is their default, not the user's. The config is
    found on the call stack (the ``cfg`` the training function holds):

    - not written: mode ``'complete'`` (DDP's fast path; the buckets of unreached parameters
      completed, the optimizer kept off parameters no rank used): a model that leaves
      parameters unused trains, as under DDP's graph search, without its cost;
    - ``find_unused_parameters = True``: DDP's graph search, as written;
    - ``find_unused_parameters = False``: DDP's strict fast path, on purpose: if a rank
      leaves parameters unreached, every rank stops before the next forward with the same
      :class:`~mmdet3d_ddp_guard.UnusedParametersError`, naming them (no hang, no
      "Expected to have finished reduction");
    - ``find_unused_parameters = 'auto'``: the same as not writing it.

    A script that passes True itself (the config silent) gets the graph search. A script
    that ignores the key (SparseBEV's) still gets what the config wrote.

    **When unused parameters are handled.** In mmcv 1.x the backward and the optimizer
    step run in the optimizer hook (``OptimizerHook``, ``GradientCumulativeOptimizerHook``,
    ``Fp16OptimizerHook``, or a codebase's own), with no hook point between them. So the
    guard acts at the end of the step's last backward, from autograd's engine
    (:class:`~mmdet3d_ddp_guard.guard.step_backwards.StepBackwards`; a final callback, after
    DDP's own finalisation): before gradient clipping and the optimizer step, as DDP's
    reduction is, however the backward was called. Each of these trains as under mmcv's own
    DDP (bit for bit on 2 ranks, ``tests/openmmlab1/test_step_backwards.py``):

    - ``loss.backward()`` on the returned loss, or on a divided or scaled one;
      ``torch.autograd.backward(loss)``;
    - reentrant activation checkpointing (``with_cp=True``, ``torch.utils.checkpoint``),
      also where the layers nearest the loss, or the loss itself, are inside the block:
      the end is taken on the outer backward, never on the block's nested one;
    - several backwards in one step (``loss_a``, then ``loss_b``): the guard waits while
      the loss ``train_step`` returned still reaches parameters without a gradient, as
      DDP's buckets wait; a later backward that reaches a parameter the guard had already
      completed (one that loss does not reach) is a clear error, before the optimizer step;
    - a backward outside the step (a probe that only rank 0 runs after the optimizer
      hook): ignored, as DDP's reducer ignores it;
    - a step whose loss is not back-propagated at all (an optimizer hook that skips a NaN
      loss), or whose backward raises before reaching a parameter: nothing is reduced or
      settled, as under DDP; if other ranks do back-propagate, that is a real hang, which
      the stall guard names. A backward that raises after reaching parameters leaves DDP's
      reducer unable to go on (plain DDP raises "Expected to have finished reduction" at
      the next step): the guard raises there, naming the cause.

    A model that runs its own backward inside ``train_step`` cannot train under mmcv's DDP,
    in any mode: mmcv prepares DDP's reducer only after ``module.train_step`` returns, so
    each backward meets the previous step's preparation, and DDP raises within three steps
    (``initialize_buckets must NOT be called during autograd execution``, or "Expected to
    mark a variable ready only once" under its graph search). The guard stops at the end of
    the first such backward instead, and says so, with the fix: return the loss and let the
    optimizer hook back-propagate it.

    **The stall guard** runs as under MMEngine (``ddp_guard = dict(stall_timeout=...)`` in
    the config; None turns it off; 180 s by default; ``ddp_guard = dict(enabled=False)``
    builds mmcv's own wrapper instead, unguarded), with the same verdicts from the ranks'
    recorded collectives: the phases it names are forward, backward, settling, optimizer
    step, hooks (what runs after the optimizer hook), validation (the evaluation hooks'
    ``_do_evaluate``), data (the next batch), and checkpoint while the runner's
    ``save_checkpoint`` writes (a stop waits for it). ``StallPhaseHook``, which the wrapper
    attaches to the runner that first calls its ``train_step``, marks them and stops the
    watchdog at the end of the run.

    **CPU.** A CPU module gets no ``device_ids`` (mmdet's ``build_ddp`` passes
    ``[LOCAL_RANK]``), and its DataContainer inputs are unwrapped as ``MMDataParallel``
    does on the CPU.

    Args:
        module (nn.Module): The model.
        *args, **kwargs: What the training script passes to ``MMDistributedDataParallel``
            (torch's ``DistributedDataParallel`` arguments).
    """

    lines = MMCV1_LINES

    def __init__(self, module, *args, **kwargs):
        arguments = ddp_arguments(module, args, kwargs)
        script_value = arguments.pop('find_unused_parameters', False)
        static_graph = arguments.pop('static_graph', False)
        cfg = _training_config()
        requested, source = read_config_request(script_value, cfg)
        stall_timeout = guard_options(cfg).get('stall_timeout', DEFAULT_STALL_TIMEOUT)
        policy = DecisionPolicy(requested, source, static_graph, MMCV1_LINES)
        self.build_guarded(module, policy, static_graph, stall_timeout, arguments)

    def _adapter_state(self):
        return ('_runner', '_optimizer_hooks', 'step_backwards')

    def _init_adapter_state(self) -> None:
        self._runner = None
        self._optimizer_hooks = 'the optimizer hook'
        self.step_backwards = StepBackwards(self, MMCV1_STEP_ERRORS, waits_for_outputs=True)

    def train_step(self, *inputs, **kwargs):
        """mmcv's train step; its backward, wherever it runs, settles unused parameters."""
        if self._runner is None:
            caller = sys._getframe(1).f_locals.get('self')
            if isinstance(caller, BaseRunner):  # mmcv's runners call model.train_step
                self._runner = weakref.ref(caller)
                self._optimizer_hooks = _optimizer_hooks(caller)
                if self.stall_watchdog is not None:
                    StallPhaseHook(self.stall_watchdog).attach(caller)
        iteration = self._iteration()
        with self.telling_the_stall_guard():
            self.step_backwards.begin_step(iteration, self._optimizer_hooks)
        with self.guarded_step(iteration):
            with self.step_backwards.module_step():
                outputs = super().train_step(*inputs, **kwargs)
            for revision in self.forward_returned():
                self.log(revision)
            # mmcv's train_step prepares DDP's reducer for the backward on these conditions.
            reduces = torch.is_grad_enabled() and self.require_backward_grad_sync
            loss = outputs.get('loss') if isinstance(outputs, dict) else None
            self.step_backwards.expect_backwards(
                [loss] if isinstance(loss, torch.Tensor) else [], reduces)
        return outputs

    def _iteration(self) -> int:
        """mmcv's ``runner.iter`` (0-based, counted up after the iteration's hooks); outside
        a runner, the backwards settled so far."""
        runner = self._runner() if self._runner is not None else None
        return self.completion.iterations_ended if runner is None else runner.iter

    log = staticmethod(functools.partial(print_log, logger='mmcv'))


def _optimizer_hooks(runner: BaseRunner) -> str:
    """The runner's optimizer hook(s) by class name: where the step's backwards run."""
    names = sorted({type(hook).__name__ for hook in runner.hooks
                    if isinstance(hook, OptimizerHook)})
    return ' or '.join(names) if names else 'the optimizer hook'


def guard_mmcv_ddp() -> bool:
    """Makes ``mmcv.parallel.MMDistributedDataParallel(...)`` build the guarded wrapper:
    the class is changed in place, so the name that training modules imported at their
    top, and mmdet's ``ddp_factory``, build it too. Called by :mod:`.import_changes`;
    returns whether it changed the class (not when changed already). The mark is on the
    new ``__new__`` itself, so that ``__new__`` is the class's only changed attribute."""
    if getattr(MMDistributedDataParallel.__dict__.get('__new__'), 'ddp_guard_installed',
               False):
        return False

    def __new__(cls, *args, **kwargs):
        # Unpickling and deepcopy call __new__ with no arguments: a copy keeps its class.
        if cls is MMDistributedDataParallel and (args or kwargs):
            if guard_options(_training_config()).get('enabled', True):
                cls = GuardedMMDistributedDataParallel
            elif not torch.cuda.is_available():
                cls = CPUCompatibleMMDistributedDataParallel
        return object.__new__(cls)

    __new__.ddp_guard_installed = True
    MMDistributedDataParallel.__new__ = __new__
    return True


def read_config_request(script_value, cfg):
    """What the user asked for, and where: the config's top-level
    ``find_unused_parameters`` when written (whatever the script passed), True when the
    script passed it with the config silent, else ``'auto'``."""
    if cfg is not None and 'find_unused_parameters' in cfg:
        requested, _ = read_request(not_given(), cfg['find_unused_parameters'],
                                    built_by_runner=False, lines=MMCV1_LINES)
        return requested, CONFIG_TOP_LEVEL
    if script_value is True:
        return True, ('the training script (MMDistributedDataParallel('
                      'find_unused_parameters=True); the config does not write it)')
    return read_request(not_given(), not_given(), built_by_runner=False,
                        lines=MMCV1_LINES)[0], (
        'default: the config does not write find_unused_parameters (the False the training '
        "script passes then is the script's default, not a choice)")


def guard_options(cfg) -> dict:
    """The config's ``ddp_guard = dict(...)``, checked."""
    options = dict(cfg.get(OPTIONS_KEY) or {}) if cfg is not None else {}
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f'mmdet3d_ddp_guard: unknown option(s) {unknown} in the config\'s '
                         f'{OPTIONS_KEY} = dict(...); the options are {", ".join(OPTIONS)}, '
                         f'e.g. {OPTIONS_KEY} = dict(stall_timeout=300).')
    if 'stall_timeout' in options:
        check_stall_timeout(options['stall_timeout'], MMCV1_LINES)
    if not isinstance(options.get('enabled', True), bool):
        raise TypeError(f'mmdet3d_ddp_guard: {OPTIONS_KEY}.enabled must be True or False, '
                        f'not {options["enabled"]!r}.')
    return options


def _training_config() -> Optional[Config]:
    """The mmcv ``Config`` of the training that builds this wrapper: the ``cfg`` that
    ``train_detector`` (and the codebases' ``custom_train_*``) hold on the call stack, or
    the nearest frame's Config of any name."""
    frame = sys._getframe(2)
    while frame is not None:
        named = frame.f_locals.get('cfg')
        if isinstance(named, Config):
            return named
        for value in frame.f_locals.values():
            if isinstance(value, Config):
                return value
        frame = frame.f_back
    return None
