"""The texts of the errors that stop a step whose backwards run in the user's (or a
trainer's) loop after torch's DDP forward, shared by the adapters that build torch's DDP
class (a plain loop, Lightning): a second backward that reaches a parameter the step's first
backward left unused, and a backward that raised after reaching parameters. ``{hook}`` is
where the backwards run, ``{param}`` a parameter's name; each adapter adds its own words for
a backward inside the model's forward."""

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
