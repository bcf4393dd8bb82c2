"""The texts of the errors that stop an mmcv 1.x training step whose backwards the guard
cannot reduce right.

:class:`~.guarded_mmcv_ddp.GuardedMMDistributedDataParallel` raises them from the end of a
step's backwards (:class:`~mmdet3d_ddp_guard.guard.step_backwards.StepBackwards`), where mmcv's
optimizer hook runs them: a backward inside the model's ``train_step``, a second backward that
reaches a parameter already completed, a backward that raised after reaching parameters, and
backwards that left parameters of the returned loss without a gradient. Each names the cause
and the fix; ``{hook}`` is the runner's optimizer hook(s), where the backwards run.
"""
from ..guard.step_backwards import StepErrorTexts

OWN_BACKWARD_IN_TRAIN_STEP = (
    'mmdet3d_ddp_guard: {model}.train_step ran a backward itself. mmcv\'s '
    'MMDistributedDataParallel prepares DDP\'s reducer only after the model\'s train_step '
    'returns, so that backward meets the previous step\'s preparation: plain mmcv DDP '
    'raises within three steps ("initialize_buckets must NOT be called during autograd '
    'execution", or "Expected to mark a variable ready only once" with '
    'find_unused_parameters = True), and no mode can reduce it right. Fix: return the loss '
    "from train_step (dict(loss=..., log_vars=..., num_samples=...)) and let the config's "
    'optimizer hook back-propagate it (optimizer_config = dict(grad_clip=None) is mmcv\'s '
    'OptimizerHook).')

LATE_BACKWARD = (
    'mmdet3d_ddp_guard: a second backward in one training step reached {param}, whose '
    'gradient the guard had already completed with zeros at the end of the step\'s earlier '
    'backward, where DDP reduced it. Its new gradient cannot be reduced any more, and each '
    'rank would step with its own: training stops here, before the optimizer step. The '
    'earlier backward ({hook}) did not go through the loss that train_step returned, and '
    'the graph of that loss does not reach {param} (it is inside a checkpointed block, or '
    'the loss does not include it), so nothing told the guard to wait. Fix: back-propagate '
    'the sum of the losses once ((loss_a + loss_b).backward() gives the same gradients), '
    'or return from train_step a loss whose graph includes every loss the hook '
    'back-propagates.')

BACKWARD_RAISED = (
    'mmdet3d_ddp_guard: the previous step\'s backward raised after reaching parameters '
    'that DDP had been prepared to reduce, and the step was skipped. DDP\'s reducer still '
    'holds them as ready and cannot start a new step (plain mmcv DDP stops here too, with '
    '"Expected to have finished reduction in the prior iteration"); other ranks may wait '
    'for buckets this rank never launched. Fix: skip a step before its backward, on every '
    'rank alike (check the loss for NaN or inf in {hook}, and all-reduce that decision), '
    'not by catching an error raised inside the backward.')

PARTIAL_BACKWARD = (
    'mmdet3d_ddp_guard: the previous step\'s backwards ({hook}) did not go through the '
    'loss that train_step returned, and left parameters without a gradient that this loss '
    'reaches: DDP waited for them (mmcv\'s DDP with find_unused_parameters = True as '
    'well), and the optimizer stepped before their buckets were reduced. Fix: '
    'back-propagate the returned loss (or every part of it), or return from train_step the '
    'loss the hook back-propagates.')

MMCV1_STEP_ERRORS = StepErrorTexts(own_backward_in_train_step=OWN_BACKWARD_IN_TRAIN_STEP,
                                   late_backward=LATE_BACKWARD,
                                   backward_raised=BACKWARD_RAISED,
                                   partial_backward=PARTIAL_BACKWARD)
