"""The texts of the errors that stop a Lightning step whose backwards the guard cannot reduce
right, in Lightning's words: a backward inside ``training_step`` under automatic
optimization, and the shared texts of a late backward and of a backward that raised
(:mod:`~mmdet3d_ddp_guard.messages.step_error_texts`)."""
from ..guard.step_backwards import StepErrorTexts
from ..messages.step_error_texts import BACKWARD_RAISED, LATE_BACKWARD

#: Where Lightning runs a step's backwards, for ``{hook}``.
WHERE_BACKWARDS_RUN = "Lightning's optimization loop"

OWN_BACKWARD_IN_TRAINING_STEP = (
    'mmdet3d_ddp_guard: {model}.training_step ran a backward that reached its parameters '
    'under automatic optimization. Lightning runs training_step inside DDP\'s forward and '
    'back-propagates the loss it returns afterwards, so a backward inside it meets DDP\'s '
    'reducer prepared for the previous step, and no mode can reduce it right. Fix: return the '
    'loss from training_step and let Lightning back-propagate it, or set '
    'self.automatic_optimization = False and call self.manual_backward(loss).')

LIGHTNING_STEP_ERRORS = StepErrorTexts(own_backward_in_train_step=OWN_BACKWARD_IN_TRAINING_STEP,
                                       late_backward=LATE_BACKWARD,
                                       backward_raised=BACKWARD_RAISED)
