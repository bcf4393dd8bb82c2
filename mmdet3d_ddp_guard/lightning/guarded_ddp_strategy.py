"""GuardedDDPStrategy: Lightning's ``DDPStrategy``, whose DDP unused parameters cannot crash or
hang."""
import inspect
from contextlib import nullcontext
from typing import Optional

import torch

from ..guard.errors import StaticGraphChangedError, UnusedParametersError
from ..stall_guard import DEFAULT_STALL_TIMEOUT
from .lightning_guarded_ddp import LightningGuardedDDP
from .lightning_package import lightning_package

_DDPStrategy = lightning_package().strategies.DDPStrategy
#: The DDP keyword arguments the strategy passes on: the guarded wrapper's, but the two the
#: strategy gives itself.
_DDP_KEYWORDS = [name for name in inspect.signature(LightningGuardedDDP).parameters
                 if name not in ('module', 'device_ids')]


class GuardedDDPStrategy(_DDPStrategy):
    """Lightning's ``DDPStrategy``, which builds the guarded DDP in place of torch's: unused
    parameters (a branch a batch does not take, an output ``training_step`` returns for a
    callback) neither crash nor hang the run, and which ones each rank left unused is logged
    on Lightning's logger when it changes.

    ``Trainer(strategy=GuardedDDPStrategy())`` in place of ``strategy='ddp'``,
    ``DDPStrategy()`` or ``'ddp_find_unused_parameters_true'``. It takes ``DDPStrategy``'s
    arguments as Lightning takes them (``process_group_backend``, ``timeout``, the comm hook
    arguments ``ddp_comm_state``, ``ddp_comm_hook``, ``ddp_comm_wrapper``,
    ``model_averaging_period``, ``start_method``...), and torch's
    ``DistributedDataParallel`` keyword arguments, which it passes on to the wrapper, with
    one difference: ``find_unused_parameters`` defaults to ``'auto'``.

    - ``find_unused_parameters='auto'`` (default): DDP's fast path; a rank whose backward
      left parameters unreached completes them with zero gradients at the end of its
      backward, so every bucket reduces, and the parameters no rank used keep
      ``grad=None``: it trains bit for bit as ``DDPStrategy(find_unused_parameters=True)``,
      without the graph search each step. A tensor ``training_step`` returns that the loss
      leaves out (``{'loss': loss, 'preds': preds}``) counts as DDP's graph search counts it:
      the parameters only it reaches are unused in that step.
    - ``True``: DDP's graph search every step, as written.
    - ``False``: strict; every rank raises the same ``UnusedParametersError`` naming the
      parameters, the ranks and the step (plain ``DDPStrategy()`` hangs there: a rank that
      left a parameter unused enters Lightning's next per-batch broadcast while the others
      wait in the gradient all-reduce).

    Automatic optimization (a loss or a dict returned, ``accumulate_grad_batches``, whose
    micro-batches run in ``no_sync``) and manual optimization (``self.manual_backward``
    inside ``training_step``, each backward its own step) are both served; checkpoints are
    Lightning's own (the strategy adds no state to them).

    Args:
        stall_timeout (float | None): Keyword only. Seconds a rank may stay in one place
            before the stall guard compares positions with the other ranks (a hang in
            different collectives is then named on every rank, and every rank exits with
            code 1). None turns it off. Defaults to 180.
        **kwargs: ``DDPStrategy``'s arguments, and torch's ``DistributedDataParallel``
            keyword arguments (``find_unused_parameters``, ``static_graph``,
            ``bucket_cap_mb``, ``gradient_as_bucket_view``...).
    """

    def __init__(self, *args, stall_timeout: Optional[float] = DEFAULT_STALL_TIMEOUT,
                 **kwargs):
        super().__init__(*args, **kwargs)
        unknown = sorted(set(self._ddp_kwargs) - set(_DDP_KEYWORDS))
        if unknown:
            raise TypeError(
                f'GuardedDDPStrategy: unknown argument(s) {", ".join(unknown)}. It takes '
                "Lightning's DDPStrategy arguments and torch's DistributedDataParallel keyword "
                f'arguments ({", ".join(_DDP_KEYWORDS)}).')
        self._ddp_kwargs['stall_timeout'] = stall_timeout

    def _setup_model(self, model: torch.nn.Module) -> LightningGuardedDDP:
        """DDPStrategy's, with the guarded wrapper."""
        device_ids = self.determine_ddp_device_ids()
        # As DDPStrategy builds DDP: on a side stream where there are device ids.
        context = torch.cuda.stream(torch.cuda.Stream()) if device_ids is not None \
            else nullcontext()
        with context:
            return LightningGuardedDDP(module=model, device_ids=device_ids, **self._ddp_kwargs)

    def pre_backward(self, closure_loss: torch.Tensor) -> None:
        """Under manual optimization, each ``manual_backward`` is a step of its own, begun
        here, before Lightning prepares DDP's reducer for it."""
        if isinstance(self.model, LightningGuardedDDP) \
                and not self.lightning_module.automatic_optimization:
            self.model.manual_backward_begins(closure_loss)
        super().pre_backward(closure_loss)

    def on_exception(self, exception: BaseException) -> None:
        """DDPStrategy's, but for the guard's own errors: Lightning replaces any text that
        quotes DDP's "Expected to have finished reduction" with its advice to pass
        ``DDPStrategy(find_unused_parameters=True)``; the guard's name the parameters, the
        ranks and the fix in this strategy's words, and are left as they are."""
        if not isinstance(exception, (UnusedParametersError, StaticGraphChangedError)):
            super().on_exception(exception)
