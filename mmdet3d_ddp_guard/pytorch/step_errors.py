"""The texts of the errors that stop a plain PyTorch step whose backwards the guard cannot
reduce right.

:class:`~.guarded_ddp.GuardedDDP` raises them from the end of a step's backwards
(:class:`~mmdet3d_ddp_guard.guard.step_backwards.StepBackwards`), which a plain loop runs
itself after the forward: a backward inside the model's own forward, a second backward that
reaches a parameter already completed, a backward that raised after reaching parameters, and
backwards that left without a gradient parameters that the forward's output still reaches.
Each names the cause and the fix; ``{hook}`` is where the backwards run: the user's loop.
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
    'mmdet3d_ddp_guard: a second backward in one training step reached {param}, whose '
    'gradient the guard had already completed with zeros at the end of the step\'s earlier '
    'backward, where DDP reduced it. Its new gradient cannot be reduced any more, and each '
    'rank would step with its own: training stops here, before the optimizer step. The '
    'earlier backward ({hook}) went through every tensor the forward returned, or through '
    'none that still reaches {param}, so nothing told the guard to wait. Fix: back-propagate '
    'the sum of the losses once ((loss_a + loss_b).backward() gives the same gradients).')

BACKWARD_RAISED = (
    'mmdet3d_ddp_guard: the previous step\'s backward raised after reaching parameters that '
    'DDP had been prepared to reduce. DDP\'s reducer still holds them as ready and cannot '
    'start a new step (plain DDP stops here too, with "Expected to have finished reduction '
    'in the prior iteration"); other ranks may wait for buckets this rank never launched. '
    'Fix: skip a step before its backward, on every rank alike (check the loss for NaN or '
    'inf in {hook}, and all-reduce that decision), not by catching an error raised inside '
    'the backward.')

PARTIAL_BACKWARD = (
    'mmdet3d_ddp_guard: the previous step\'s backwards ({hook}) left without a gradient '
    'parameters that a tensor the forward returned still reaches, and no backward went '
    'through that tensor: DDP waited for them (torch\'s DDP with '
    'find_unused_parameters=True as well, which searches the graph from the same outputs), '
    'and the optimizer stepped before their buckets were reduced. Fix: use every tensor '
    'the forward returns in the loss, or return only those the loss uses (detach the ones '
    'kept for logging).')

PYTORCH_STEP_ERRORS = StepErrorTexts(own_backward_in_train_step=OWN_BACKWARD_IN_FORWARD,
                                     late_backward=LATE_BACKWARD,
                                     backward_raised=BACKWARD_RAISED,
                                     partial_backward=PARTIAL_BACKWARD)
