"""The texts of the errors that stop a plain PyTorch step whose backwards the guard cannot
reduce right.

:class:`~.guarded_ddp.GuardedDDP` raises them from the end of a step's backwards
(:class:`~mmdet3d_ddp_guard.guard.step_backwards.StepBackwards`), which a plain loop runs
itself after the forward: a backward inside the model's own forward, a second backward that
reaches a parameter the step's first backward left unused (which the guard completed), and a
backward that raised after reaching parameters (these two in the words every adapter that
builds torch's DDP shares, :mod:`~mmdet3d_ddp_guard.messages.step_error_texts`). Each names
the cause and the fix; ``{hook}`` is where the backwards run: the user's loop.
"""
from ..guard.step_backwards import StepErrorTexts
from ..messages.step_error_texts import BACKWARD_RAISED, LATE_BACKWARD

#: Where a plain loop's backwards run, for ``{hook}``.
WHERE_BACKWARDS_RUN = 'your training loop'

OWN_BACKWARD_IN_FORWARD = (
    'mmdet3d_ddp_guard: {model}.forward ran a backward that reached its parameters. DDP '
    'prepares its reducer for a step\'s backward when the forward returns, so a backward '
    'inside the forward meets the previous step\'s preparation, and no mode can reduce it '
    'right. Fix: return the loss (or the outputs it is computed from) from forward and call '
    'backward on it in the loop.')

PYTORCH_STEP_ERRORS = StepErrorTexts(own_backward_in_train_step=OWN_BACKWARD_IN_FORWARD,
                                     late_backward=LATE_BACKWARD,
                                     backward_raised=BACKWARD_RAISED)
