"""What an adapter owes the guard: the interface its guarded DDP wrapper implements, and the
calls each training step makes, in their order.

As ``torch.distributed.algorithms.join``'s ``Joinable`` states what a module gives ``Join``,
:class:`GuardAdapter` states what a framework's wrapper gives
:class:`~.guarded_wrapper.GuardedWrapper`, which implements the guard on top of it. An adapter
folder (``openmmlab2/``, ``openmmlab1/``) holds the one class that implements both, and its
framework's row of :mod:`mmdet3d_ddp_guard.environment.framework_table` says how to find it.
"""
import logging
from abc import ABC, abstractmethod
from typing import Tuple

from ..messages.config_lines import ConfigLines


class GuardAdapter(ABC):
    """The duties of a framework's guarded DDP wrapper to the guard.

    **What it gives.** Its framework's words (:attr:`lines`), its framework's logging
    function (:meth:`log`), and its own per-wrapper attributes (:meth:`_adapter_state`,
    :meth:`_init_adapter_state`), which a copy of the wrapper leaves out and sets anew.

    **What it calls, each training step, in this order** (``GuardedWrapper``'s methods;
    ``tests/test_one_way_step.py`` holds both adapters to it, with and without the report
    hook):

    1. ``guarded_step(iteration)`` around the whole step, with its framework's iteration
       number (its runner's; outside a runner, the number of backwards settled so far,
       :attr:`UnusedCompletion.iterations_ended
       <.completion.UnusedCompletion.iterations_ended>`): this step's stall position and
       record start there;
    2. ``forward_returned()`` once the model's forward has returned, before any backward:
       what the previous steps left open in the usage record is resolved and acted on there
       (a report hook may have resolved it already, after the optimizer step, through
       ``resolved_for_report``: resolving twice is a no-op); it returns the messages of the
       decision's revisions, which the adapter logs with its framework (the guard calls no
       logger; at the run's end its report takes the last ones with ``take_revisions``);
    3. ``enter_backward()``, then the backward inside ``telling_the_stall_guard()``, where
       the framework lets the wrapper run it (MMEngine's optim wrapper);
    4. ``settle_after_backward(reduces, iteration)`` with the same iteration once the
       step's last backward is over and before the optimizer step (mmcv 1.x, whose
       optimizer hook runs the backward after ``train_step`` returned: from
       :class:`~.step_backwards.StepBackwards`, which finds that point in autograd and calls
       these two methods of the wrapper it was given);
    5. any other part of the step it runs itself inside ``telling_the_stall_guard()``, so
       that its error reaches the stall guard first (the other ranks then learn that this
       one raised, instead of waiting for it).

    The guard takes nothing but the arguments of these calls during a step and calls
    nothing of the adapter back: it logs through :meth:`log`, a plain function of the
    framework, and hands resolved iterations only to whoever asks (``resolved_for_report``).
    """

    @property
    @abstractmethod
    def lines(self) -> ConfigLines:
        """The config lines the wrapper's messages name, in its framework's words."""

    @staticmethod
    @abstractmethod
    def log(message: str, level: int = logging.INFO) -> None:
        """The framework's own logging function (``logging.ERROR`` reaches every rank's
        console: the stall guard's verdicts); a plain function, so that the counts' comm
        hook and the watchdog's thread hold no reference back to the wrapper."""

    @abstractmethod
    def _adapter_state(self) -> Tuple[str, ...]:
        """The adapter's own per-wrapper attributes, left out of a copy."""

    @abstractmethod
    def _init_adapter_state(self) -> None:
        """Sets them anew: at construction, and in a copy."""
