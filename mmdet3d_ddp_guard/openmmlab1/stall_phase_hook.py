"""mmcv 1.x's runner, told to the stall guard: its checkpoint writes and the end of its run."""
import functools

from mmcv.runner import HOOKS, Hook

from ..stall_guard import Phase


@HOOKS.register_module()
class StallPhaseHook(Hook):
    """Tells the stall guard when mmcv's runner writes a checkpoint, and stops its watchdog
    when the run ends.

    mmcv 1.x's runners have no checkpoint or phase hooks that the guarded wrapper could use:

    - the runner's ``save_checkpoint`` is wrapped so that the rank publishes the phase
      'checkpoint' while it writes: a stop verdict then waits for the write (at most 2
      minutes) before any rank exits, as the launcher kills every rank once one exits and a
      checkpoint cut in the middle does not load;
    - ``after_run`` stops the watchdog: nothing else tells the wrapper that training is over,
      and the watchdog would judge the rest of the script (an evaluation, a test) as a stall.

    The guarded ``MMDistributedDataParallel`` attaches it to the runner that first calls its
    ``train_step`` (:meth:`attach`); there is nothing to configure.

    Args:
        watchdog (StallWatchdog): The wrapper's watchdog.
    """

    def __init__(self, watchdog):
        self.watchdog = watchdog

    def attach(self, runner) -> None:
        """Registers this hook on ``runner`` and wraps its ``save_checkpoint``."""
        runner.register_hook(self, priority='LOWEST')
        position = self.watchdog.position
        save_checkpoint = runner.save_checkpoint

        @functools.wraps(save_checkpoint)
        def save_checkpoint_in_its_phase(*args, **kwargs):
            phase = position.phase
            position.enter(Phase.CHECKPOINT)
            try:
                return save_checkpoint(*args, **kwargs)
            finally:
                position.enter(phase)
        runner.save_checkpoint = save_checkpoint_in_its_phase

    def after_run(self, runner) -> None:
        self.watchdog.stop()
