"""mmcv 1.x's runner, told to the stall guard: what runs after the optimizer step, its
evaluations, its checkpoint writes and the end of its run."""
import functools

from mmcv.runner import HOOKS, EvalHook, Hook, OptimizerHook

from ..stall_guard import Phase


@HOOKS.register_module()
class StallPhaseHook(Hook):
    """Tells the stall guard what mmcv's runner does after a step's optimizer step, and
    stops its watchdog when the run ends.

    mmcv 1.x's runners run the backward, the optimizer step, the evaluation, the checkpoint
    and the loggers all in ``after_train_iter`` hooks, and have no phase hooks that the
    guarded wrapper could use, so the runner's own objects are wrapped, on this runner only
    (the classes are untouched):

    - each optimizer hook's ``after_train_iter``: once it returns, the rank is in the phase
      'hooks' (the hooks after the optimizer step: loggers, ``IterTimerHook``, a codebase's
      own), not 'optimizer step';
    - each evaluation hook's ``_do_evaluate`` (mmcv's ``EvalHook`` and ``DistEvalHook``,
      mmdet's, a codebase's subclass): the phase 'validation' while it runs, as under
      MMEngine, so that a rank that waits in ``collect_results_cpu`` for a rank still
      testing is named as waiting in the evaluation;
    - the runner's ``save_checkpoint``: the phase 'checkpoint' while it writes; a stop
      verdict then waits for the write (at most 2 minutes) before any rank exits, as the
      launcher kills every rank once one exits and a checkpoint cut in the middle does not
      load.

    This hook itself runs last in ``after_train_iter`` (priority ``LOWEST``) and enters the
    phase 'data' (the next batch), and in ``after_run`` stops the watchdog: nothing else
    tells the wrapper that training is over, and the watchdog would judge the rest of the
    script (an evaluation, a test) as a stall.

    The guarded ``MMDistributedDataParallel`` attaches it to the runner that first calls its
    ``train_step`` (:meth:`attach`); there is nothing to configure.

    Args:
        watchdog (StallWatchdog): The wrapper's watchdog.
    """

    def __init__(self, watchdog):
        self.watchdog = watchdog

    def attach(self, runner) -> None:
        """Registers this hook on ``runner`` and wraps its optimizer and evaluation hooks'
        methods and its ``save_checkpoint``."""
        runner.register_hook(self, priority='LOWEST')
        position = self.watchdog.position
        for hook in runner.hooks:
            if isinstance(hook, OptimizerHook):
                hook.after_train_iter = _then(hook.after_train_iter, position, Phase.HOOKS)
            elif isinstance(hook, EvalHook) and hasattr(hook, '_do_evaluate'):
                hook._do_evaluate = _during(hook._do_evaluate, position, Phase.VALIDATION)
        runner.save_checkpoint = _during(runner.save_checkpoint, position, Phase.CHECKPOINT)

    def after_train_iter(self, runner) -> None:
        self.watchdog.position.enter(Phase.DATA)

    def after_run(self, runner) -> None:
        self.watchdog.stop()


def _during(method, position, phase: Phase):
    """``method`` with the rank in ``phase`` while it runs, then back in the phase before."""
    @functools.wraps(method)
    def in_its_phase(*args, **kwargs):
        before = position.phase
        position.enter(phase)
        try:
            return method(*args, **kwargs)
        finally:
            position.enter(before)
    return in_its_phase


def _then(method, position, phase: Phase):
    """``method``, then the rank in ``phase`` once it returned."""
    @functools.wraps(method)
    def then_the_phase(*args, **kwargs):
        result = method(*args, **kwargs)
        position.enter(phase)
        return result
    return then_the_phase
