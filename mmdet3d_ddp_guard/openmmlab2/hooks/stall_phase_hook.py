"""The MMEngine Runner's phases between training steps, told to GuardedDDP's stall guard."""
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

from ...stall_guard import Phase


@HOOKS.register_module()
class StallPhaseHook(Hook):
    """Tells GuardedDDP's stall guard what the Runner does between training steps.

    GuardedDDP itself marks the forward, backward, settling and optimizer step; this hook
    marks data loading, validation and checkpoint saving, so that a rank that waits for rank
    0's checkpoint, a slow data loader or a long validation is seen as waiting for a busy
    rank, not as hung. GuardedDDP adds it to its Runner at the first training step when the
    config does not list it; there is nothing to configure. It runs after every other hook
    of each point (priority ``LOWEST``), so that what the other hooks do counts as the
    phase before. Its cost is an attribute write per call.
    """

    priority = 'LOWEST'

    @staticmethod
    def _position(runner):
        return getattr(runner.model, 'stall_position', None)

    def _enter(self, runner, phase: Phase) -> None:
        position = self._position(runner)
        if position is not None:
            position.enter(phase)

    def _move(self, runner) -> None:
        position = self._position(runner)
        if position is not None:
            position.move()

    def before_train_epoch(self, runner) -> None:
        self._enter(runner, Phase.DATA)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._enter(runner, Phase.DATA)

    def before_val(self, runner) -> None:
        self._enter(runner, Phase.VALIDATION)

    def after_val_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._move(runner)

    def after_val(self, runner) -> None:
        self._enter(runner, Phase.HOOKS)

    def before_test(self, runner) -> None:
        self._enter(runner, Phase.VALIDATION)

    def after_test_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._move(runner)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        self._enter(runner, Phase.CHECKPOINT)

    def after_run(self, runner) -> None:
        watchdog = getattr(runner.model, 'stall_watchdog', None)
        if watchdog is not None:
            watchdog.stop()
