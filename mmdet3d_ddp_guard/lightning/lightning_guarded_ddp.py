"""The guarded torch DDP that :class:`~.guarded_ddp_strategy.GuardedDDPStrategy` builds around
a LightningModule, with Lightning's words and logger."""
from torch.nn.parallel import DistributedDataParallel

from ..environment.framework_table import LIGHTNING_LINES
from ..guard.step_per_forward import StepPerForwardWrapper
from .lightning_log import log_to_lightning
from .step_errors import LIGHTNING_STEP_ERRORS, WHERE_BACKWARDS_RUN


class LightningGuardedDDP(StepPerForwardWrapper, DistributedDataParallel):
    """torch's ``DistributedDataParallel`` around a LightningModule, guarded: its forward is
    Lightning's ``training_step`` (Lightning redirects it), and under automatic
    optimization that forward is the step, whose returned tensors (the loss, or every tensor
    of the dict it returns) Lightning's closure back-propagates. Under manual optimization
    the steps begin at each ``manual_backward``
    (:meth:`manual_backward_begins`, called by the strategy), where Lightning prepares DDP's reducer itself, inside this
    forward. Its arguments are those of the plain loop's ``GuardedDDP``."""

    lines = LIGHTNING_LINES
    log = staticmethod(log_to_lightning)
    step_errors = LIGHTNING_STEP_ERRORS
    where_backwards_run = WHERE_BACKWARDS_RUN

    def forward(self, *inputs, **kwargs):
        if not getattr(self.module, 'automatic_optimization', True):
            return DistributedDataParallel.forward(self, *inputs, **kwargs)
        output, revisions = self.guarded_forward(*inputs, **kwargs)
        self._log_all(revisions)
        return output

    def manual_backward_begins(self, loss) -> None:
        """Under manual optimization, before Lightning prepares DDP's reducer for the
        backward of ``loss``: a step of its own begins."""
        self._log_all(self.backward_prepared(loss))

    def _log_all(self, revisions) -> None:
        for revision in revisions:
            self.log(revision)
