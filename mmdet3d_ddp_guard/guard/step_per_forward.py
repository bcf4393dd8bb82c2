"""A guarded torch ``DistributedDataParallel`` whose training step is its forward, shared by
every adapter whose user (or trainer) builds torch's DDP class itself: a plain loop's
``GuardedDDP`` and PyTorch Lightning's strategy.

It takes the installed torch's DDP signature as it is, but for ``find_unused_parameters``
defaulting to ``'auto'``; a forward with gradients enabled is one step, whose backwards
(the user's loop, the trainer's closure) settle the unused parameters when they are over,
counting every tensor the forward returned as DDP's graph search counts it. Where a trainer
prepares DDP's reducer for a backward itself, inside the forward (Lightning's manual
optimization), the step begins at that backward instead (:meth:`backward_prepared`).
The adapter's ``forward`` calls :meth:`guarded_forward` and logs what it returns.
"""
import inspect
from typing import List, Optional, Tuple

import torch
from torch.nn.parallel import DistributedDataParallel

from ..environment.versions import graph_search_accumulates_right
from ..messages.guard_errors import graph_search_accumulation_refused, static_graph_not_a_bool
from ..messages.mode_request import AUTO, read_request
from ..stall_guard import DEFAULT_STALL_TIMEOUT, check_stall_timeout
from .decision_policy import DecisionPolicy, Mode
from .guarded_wrapper import GuardedWrapper
from .step_backwards import StepBackwards, StepErrorTexts

#: The installed torch's DDP signature, which the wrapper takes as it is (but for the default
#: of ``find_unused_parameters``), plus the guard's own keyword-only ``stall_timeout``.
_DDP_SIGNATURE = inspect.signature(DistributedDataParallel.__init__)


def _guarded_signature() -> inspect.Signature:
    parameters = [
        parameter.replace(default=AUTO) if name == 'find_unused_parameters' else parameter
        for name, parameter in _DDP_SIGNATURE.parameters.items()
    ]
    parameters.append(inspect.Parameter('stall_timeout', inspect.Parameter.KEYWORD_ONLY,
                                        default=DEFAULT_STALL_TIMEOUT))
    return _DDP_SIGNATURE.replace(parameters=parameters)


class StepPerForwardWrapper(GuardedWrapper):
    """Goes first in the bases of an adapter's ``DistributedDataParallel`` subclass, which
    gives :attr:`lines`, :meth:`log`, :attr:`step_errors` (its words for the errors a step's
    backwards can end in) and :attr:`where_backwards_run` (for those texts)."""

    step_errors: StepErrorTexts
    where_backwards_run: str

    def __init__(self, *args, stall_timeout: Optional[float] = DEFAULT_STALL_TIMEOUT,
                 **kwargs):
        arguments = _DDP_SIGNATURE.bind(self, *args, **kwargs).arguments
        arguments.pop('self')
        module = arguments.pop('module')
        static_graph = arguments.pop('static_graph', False)
        if not isinstance(static_graph, bool):
            raise TypeError(static_graph_not_a_bool(static_graph, self.lines))
        check_stall_timeout(stall_timeout, self.lines)
        requested, source = read_request(arguments.pop('find_unused_parameters', AUTO),
                                         built_by_runner=False, lines=self.lines)
        policy = DecisionPolicy(requested, source, static_graph, self.lines)
        self.build_guarded(module, policy, static_graph, stall_timeout, arguments)

    __init__.__signature__ = _guarded_signature()

    def _adapter_state(self):
        return ('step_backwards', )

    def _init_adapter_state(self) -> None:
        self.step_backwards = StepBackwards(self, self.step_errors, waits_for_outputs=False)

    def guarded_forward(self, *inputs, **kwargs) -> Tuple[object, List[str]]:
        """DDP's forward; with gradients enabled, a guarded step, whose backwards settle
        the unused parameters when they are over. Returns the output and the messages of the
        decision's revisions, for the adapter to log (the guard calls no logger)."""
        if not torch.is_grad_enabled():
            return super().forward(*inputs, **kwargs), []
        iteration, reduces = self._begin_step()
        with self.guarded_step(iteration):
            with self.step_backwards.module_step():
                output = super().forward(*inputs, **kwargs)
            return output, self._expect_backwards(output, reduces)

    def backward_prepared(self, loss) -> List[str]:
        """A step that begins at a backward of ``loss`` whose reducer its trainer prepares
        itself, inside the forward (Lightning's ``manual_backward``), not at the forward: call
        it before that preparation, on every rank alike. Returns the messages of the
        decision's revisions, for the adapter to log."""
        iteration, reduces = self._begin_step()
        with self.guarded_step(iteration):
            return self._expect_backwards(loss, reduces)

    def _begin_step(self) -> Tuple[int, bool]:
        # Outside a framework's runner the iteration is the backwards settled so far.
        iteration = self.completion.iterations_ended
        # False inside no_sync (gradient accumulation): this step's backward reduces nothing.
        reduces = self.require_backward_grad_sync
        if not reduces and self.decision.mode == Mode.FIND_UNUSED \
                and not graph_search_accumulates_right(torch.__version__):
            raise RuntimeError(graph_search_accumulation_refused(torch.__version__,
                                                                 self.lines))
        with self.telling_the_stall_guard():
            self.step_backwards.begin_step(iteration, self.where_backwards_run)
        return iteration, reduces

    def _expect_backwards(self, output, reduces: bool) -> List[str]:
        revisions = self.forward_returned()
        self.step_backwards.expect_backwards(output_tensors(output), reduces)
        return revisions


def output_tensors(output) -> List[torch.Tensor]:
    """The tensors of a forward's output, where DDP's graph search starts: in nested lists,
    tuples, dicts and dataclasses, as DDP's own ``_find_tensors`` finds them."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [tensor for item in output for tensor in output_tensors(item)]
    if isinstance(output, dict):
        return [tensor for item in output.values() for tensor in output_tensors(item)]
    fields = getattr(output, '__dataclass_fields__', None)
    if fields is not None:
        return [tensor for name in fields for tensor in output_tensors(getattr(output, name))]
    return []
