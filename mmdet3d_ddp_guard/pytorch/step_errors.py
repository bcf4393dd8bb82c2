"""The texts of the errors that stop a plain PyTorch step whose backwards the guard cannot
reduce right.

:class:`~.guarded_ddp.GuardedDDP` raises them from the end of a step's backwards
(:class:`~mmdet3d_ddp_guard.guard.step_backwards.StepBackwards`), which a plain loop runs
itself after the forward: a backward inside the model's own forward, a second backward that
reaches a parameter the step's first backward left unused (which the guard completed), and a
backward that raised after reaching parameters. Each names the cause and the fix; ``{hook}``
is where the backwards run: the user's loop.
"""
from ..guard.step_backwards import StepErrorTexts

#: Where a plain loop's backwards run, for ``{hook}``.
WHERE_BACKWARDS_RUN = 'your training loop'

OWN_BACKWARD_IN_FORWARD = (
    'mmdet3d_ddp_guard: {model}.forward ran a backward that reached its parameters. DDP '
    'prepares its reducer for a step\'s backward when the forward returns, so a backward '
    'inside the forward meets the previous step\'s preparation, and no mode can reduce it '
    'right. Fix: return the loss (or the outputs it is computed from) from forward and call '
    'backward on it in the loop.')

LATE_BACKWARD = (
    'mmdet3d_ddp_guard: a second backward in one training step reached {param}, which the '
    'step\'s first backward ({hook}) had left without a gradient. A step ends at its first '
    'backward: a tensor the forward returned that it did not go through counts as unused '
    'there (the loss left it out), so the guard completed {param} with zeros and DDP reduced '
    'it then. Its new gradient cannot be reduced any more, and each rank would step with its '
    'own: training stops here, before the optimizer step. Fix: back-propagate the sum of the '
    'losses once ((loss_a + loss_b).backward() gives the same gradients).')

BACKWARD_RAISED = (
    'mmdet3d_ddp_guard: the previous step\'s backward raised after reaching parameters that '
    'DDP had been prepared to reduce. DDP\'s reducer still holds them as ready and cannot '
    'start a new step (plain DDP stops here too, with "Expected to have finished reduction '
    'in the prior iteration"); other ranks may wait for buckets this rank never launched. '
    'Fix: skip a step before its backward, on every rank alike (check the loss for NaN or '
    'inf in {hook}, and all-reduce that decision), not by catching an error raised inside '
    'the backward.')

PYTORCH_STEP_ERRORS = StepErrorTexts(own_backward_in_train_step=OWN_BACKWARD_IN_FORWARD,
                                     late_backward=LATE_BACKWARD,
                                     backward_raised=BACKWARD_RAISED)
