"""When the backwards of a training step are over, where the framework runs them outside the
wrapper (mmcv 1.x: the optimizer hook back-propagates after ``train_step`` has returned).

The wrapper must settle unused parameters once per step: after the last backward DDP
reduces, before gradient clipping and the optimizer step. Nothing in mmcv 1.x marks that
point, so :class:`StepBackwards` finds it from autograd itself, and it is not simply "the end
of the first backward that reaches a parameter":

- **Nested backwards.** Reentrant activation checkpointing (``torch.utils.checkpoint``,
  mmcv's and mmdet's ``with_cp=True`` blocks) runs a backward of its own inside the outer one,
  from its autograd Function's ``backward``. Where the layers nearest the loss are inside the
  block, the first parameter gradients of the step arrive in that nested backward; settling
  at its end would complete the parameters outside the block with zeros before their real
  gradients arrive. So the end is always taken on the *outer* backward: the grad hook on the
  loss ``train_step`` returned runs in the outer backward before any parameter is reached,
  and a parameter hook arms it only outside any autograd Function's ``backward``.
- **Several backwards in one step.** An optimizer hook may back-propagate ``loss_a`` and
  then ``loss_b``. mmcv's DDP reduces both: its buckets wait for the second. Where the
  adapter says so (``waits_for_outputs``, mmcv 1.x), a backward that went through the
  returned loss covers the step; one that did not (a part of it) ends the step only when no
  parameter it left unreached can still be reached from the returned loss, DDP's own graph
  search, run only then. torch's DDP (a plain loop, which returns the forward's output and
  computes the loss from it) does not wait: with ``find_unused_parameters=True`` its
  ``_DDPSink`` hands every returned tensor that a backward did not go through an undefined
  gradient, so the parameters only such tensors reach are unused in that step; the first
  backward ends the step there too. If a later backward reaches a parameter that the guard
  already completed with zeros (one outside that loss's graph, such as one inside a
  checkpointed block the returned loss reaches only through the block), the error
  ``late_backward`` is raised inside that backward, before the optimizer step.
- **Backwards outside a step** (a probe that only rank 0 runs after the optimizer hook, a
  gradient-norm check): DDP's reducer is not prepared for them and ignores them; so does
  this, on every rank alike.
- **A backward that raises** runs no final callback. The next step starts clean: nothing of
  it is left here; if it had reached parameters while DDP was prepared, DDP's reducer holds
  them as ready and cannot start a new step (plain DDP raises "Expected to have finished
  reduction in the prior iteration" there), so the error ``backward_raised`` is raised
  instead, naming the cause.
- **A backward inside the model's own ``train_step``** meets DDP's reducer still prepared for
  the previous step (mmcv prepares it after ``train_step`` returns): no mode can reduce it
  right, so its end raises the error ``own_backward_in_train_step``.

It reports to the guarded wrapper it was given, by calling the wrapper's own step methods
(:meth:`~.guarded_wrapper.GuardedWrapper.enter_backward`,
:meth:`~.guarded_wrapper.GuardedWrapper.settle_after_backward`), and by RuntimeErrors whose
texts the adapter gives as data (:class:`StepErrorTexts`): it calls nothing of the
adapter's.

Private API: ``torch.autograd.Variable._execution_engine.queue_callback`` (the final callback
DDP's reducer finalises with), checked by :func:`check_backward_callbacks`.
"""
import contextlib
import functools
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Set

import torch
import torch.autograd.function

from ..messages.guard_errors import backward_callbacks_missing, partial_backward_text_missing

# Frames of this code are on the stack inside every autograd Function's Python backward, and
# only there: reentrant checkpointing's nested backward runs under one (torch 1.9 to 2.14).
_FUNCTION_BACKWARD = getattr(getattr(getattr(torch.autograd.function, 'BackwardCFunction', None),
                                     'apply', None), '__code__', None)


def _engine_queue_callback() -> Optional[Callable[[Callable[[], None]], None]]:
    engine = getattr(torch.autograd.Variable, '_execution_engine', None)
    return getattr(engine, 'queue_callback', None)


def check_backward_callbacks() -> None:
    """Raises, naming torch and the API, where autograd's engine takes no final callback or
    autograd Functions' backwards cannot be told on the stack (private APIs: torch 1.9 to
    2.14 have both; the first is what DDP's own reducer finalises with)."""
    missing = [name for name, found in (
        ('torch.autograd.Variable._execution_engine.queue_callback', _engine_queue_callback()),
        ('torch.autograd.function.BackwardCFunction.apply', _FUNCTION_BACKWARD)) if found is None]
    if missing:
        raise RuntimeError(backward_callbacks_missing(torch.__version__, missing))


def after_backward(callback: Callable[[], None]) -> None:
    """Runs ``callback()`` once the backward that is running now is over, after every final
    callback queued during it, DDP's own (its reducer queues its finalisation when its last
    bucket is launched, which has happened by the time a first final callback runs: so the
    callback queued from there comes after DDP's). Only valid during a backward."""
    queue = _engine_queue_callback()
    queue(lambda: queue(callback))


def inside_function_backward() -> bool:
    """Whether this runs inside an autograd Function's Python ``backward`` (a nested,
    reentrant backward: checkpointing's). One stack walk."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is _FUNCTION_BACKWARD:
            return True
        frame = frame.f_back
    return False


def reaches_any(root: torch.Tensor, params: Set[torch.Tensor]) -> bool:
    """Whether the autograd graph of ``root`` (also after its backward freed its buffers)
    accumulates into any of ``params``: DDP's graph search, from one tensor."""
    seen, pending = set(), [root.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if getattr(node, 'variable', None) in params:
            return True
        pending.extend(next_node for next_node, _ in node.next_functions)
    return False


@dataclass(frozen=True)
class StepErrorTexts:
    """The framework's words for the errors (RuntimeError) a step's backwards can end in,
    each a format string naming the cause and the fix; ``{hook}`` is where the framework
    runs the backwards (its optimizer hooks), ``{model}`` the model's class, ``{param}`` a
    parameter's name."""
    own_backward_in_train_step: str  # {model}
    late_backward: str  # {param}, {hook}
    backward_raised: str  # {hook}
    #: {hook}; only where the step's backwards wait for the returned outputs.
    partial_backward: Optional[str] = None


class _Step:
    """One step's backwards: what they reached and whether they settled."""

    def __init__(self, iteration: int, hook: str):
        self.iteration = iteration  # the framework's, given at the start of the step
        self.hook = hook  # where the step's backwards run, for the errors' texts
        self.in_module_step = False  # the model's own step (or forward) is running
        #: What the step returned for its backwards (mmcv 1.x: the loss; a plain loop: every
        #: tensor of the forward's output, as DDP's graph search takes them) that no
        #: backward of the step has gone through yet; emptied when settled.
        self.outputs: List[torch.Tensor] = []
        self.reduces = False  # DDP's reducer was prepared for this step's backwards
        self.reached = False  # a backward of the step reached a parameter
        self.waiting = False  # a backward ended; the returned outputs still reach more
        self.settled = False
        self.completed: Set[torch.Tensor] = set()  # filled with zeros when it settled


class StepBackwards:
    """Tells ``wrapper`` when a training step's first outer backward reaches the model
    (:meth:`~.guarded_wrapper.GuardedWrapper.enter_backward`), and settles the step once,
    after its last reducing backward (DDP's finalisation included), before the optimizer
    step (:meth:`~.guarded_wrapper.GuardedWrapper.settle_after_backward`, with the step's
    iteration); raises a RuntimeError with the framework's text (:class:`StepErrorTexts`)
    where the backwards cannot be reduced right.

    Each step, the adapter calls :meth:`begin_step` before the forward, runs the model's own
    ``train_step`` inside :meth:`module_step`, and calls :meth:`expect_backwards` after it.

    Args:
        wrapper (GuardedWrapper): The guarded wrapper whose steps end here; its usage
            record's parameter hooks report each gradient. Backwards that its settling runs
            itself are not the step's.
        texts (StepErrorTexts): The framework's words for the errors.
        waits_for_outputs (bool): Whether a backward that left out a returned output still
            reaching a parameter without a gradient waits for a later backward of the step
            (mmcv 1.x's DDP), rather than ending the step with those parameters unused
            (torch's DDP, through its ``_DDPSink``). Waiting needs ``texts.partial_backward``.
    """

    def __init__(self, wrapper, texts: StepErrorTexts, waits_for_outputs: bool):
        check_backward_callbacks()
        if waits_for_outputs and texts.partial_backward is None:
            raise ValueError(partial_backward_text_missing())
        self._wrapper = wrapper
        self._record = wrapper.usage_record
        self._texts = texts
        self._waits_for_outputs = waits_for_outputs
        self._step: Optional[_Step] = None
        self._armed = False  # a final callback is queued on the running outer backward
        self._settling = False
        self._record.on_parameter_reached(self._parameter_reached)

    def begin_step(self, iteration: int, hook: str) -> None:
        """At the start of ``train_step``, before its forward: the framework's ``iteration``
        and ``hook``, where it runs the step's backwards (named by the errors). What a
        previous step left behind is cleared (or raised, where DDP cannot go on), and
        backwards count again."""
        previous, self._step = self._step, _Step(iteration, hook)
        armed, self._armed = self._armed, False
        if previous is None or previous.settled:
            return
        if armed and previous.reduces and previous.reached:
            raise RuntimeError(self._texts.backward_raised.format(hook=hook))
        if previous.waiting:
            if previous.reduces:
                raise RuntimeError(self._texts.partial_backward.format(hook=hook))
            self._settle(previous)  # nothing to reduce: settling late changes no gradient

    @contextlib.contextmanager
    def module_step(self):
        """Around the model's own ``train_step``: a backward that ends inside it raises the
        error ``own_backward_in_train_step``."""
        self._step.in_module_step = True
        try:
            yield
        finally:
            self._step.in_module_step = False

    def expect_backwards(self, outputs: Sequence[torch.Tensor], reduces: bool) -> None:
        """After the step's forward: ``outputs`` are the tensors it returned for the step's
        backwards to go through (mmcv 1.x: the loss for the optimizer hook; a plain loop:
        every tensor of the forward's output), ``reduces`` whether DDP's reducer was
        prepared. A step settles at the end of its first outer backward that reaches a
        parameter or goes through an output, unless it waits for outputs and one that no
        backward went through yet still reaches a parameter left without a gradient (then a
        later backward of the step is awaited)."""
        step = self._step
        step.reduces = reduces
        step.outputs = [output for output in outputs if output.requires_grad]
        for output in step.outputs:
            # By id: the tensor's own hook holding the tensor would be a reference cycle.
            output.register_hook(functools.partial(self._output_reached, id(output)))

    def _output_reached(self, output_id: int, grad: torch.Tensor) -> None:
        step = self._step
        if self._settling or step is None or step.settled:
            return
        step.outputs = [known for known in step.outputs if id(known) != output_id]
        if not self._armed:
            self._arm()

    def _parameter_reached(self, param: torch.Tensor) -> None:
        step = self._step
        if self._settling or step is None:
            return
        if step.settled:
            if param in step.completed:
                table = self._record.table
                # By identity: list.index would compare tensors elementwise.
                name = next(name for name, known in zip(table.names, table.params)
                            if known is param)
                raise RuntimeError(self._texts.late_backward.format(param=name,
                                                                    hook=step.hook))
            return
        step.reached = True
        if not self._armed and not inside_function_backward():
            self._arm()

    def _arm(self) -> None:
        self._armed = True
        self._wrapper.enter_backward()
        after_backward(self._backward_over)

    def _backward_over(self) -> None:
        self._armed = False
        step = self._step
        if self._waits_for_outputs and step.outputs and self._outputs_reach_unreached(step):
            step.waiting = True
            return
        self._settle(step)

    def _outputs_reach_unreached(self, step: _Step) -> bool:
        params = self._record.table.params
        unreached = {params[i] for i in self._record.local_unreached()}
        return bool(unreached) and any(reaches_any(output, unreached)
                                       for output in step.outputs)

    def _settle(self, step: _Step) -> None:
        step.waiting, step.settled, step.outputs = False, True, []
        if step.in_module_step:
            raise RuntimeError(self._texts.own_backward_in_train_step.format(
                model=type(self._wrapper.module).__name__))
        self._settling = True
        try:
            step.completed = set(self._wrapper.settle_after_backward(step.reduces,
                                                                     step.iteration))
        finally:
            self._settling = False
