"""The recording functions that replace ``torch.distributed``'s collectives.

They call torch's originals, and append to the one active
:class:`~.collective_log.CollectiveLog` (the stall guard's of this process) while there is
one. They are in the ``torch.distributed`` namespace only while a log is active: the first
:meth:`CollectiveRecording.activate` puts them there, and
:meth:`CollectiveRecording.deactivate` of the last active log puts torch's functions back
(the next activation reinstalls the same recording functions). They pickle as a reference to
``torch.distributed.<name>``, which any process resolves without this package.

Under ``torch.compile``, a traced call records nothing, so that Dynamo compiles what it
compiles without the guard (see :func:`_recording`); a call that Dynamo cannot trace runs
outside the graph, where it is recorded as without a compiler.
"""
import functools
from typing import Callable, Dict, Optional

import torch
import torch.distributed as dist

from ..environment.ddp_compat import is_compiling, through_one_frame, untraced
from .collective_log import COLLECTIVE_FUNCTIONS, CollectiveLog


class CollectiveRecording:
    """The recording functions of this process and where they record: the log of the
    watchdog installed in this process (:class:`~.process_stall_guard.ProcessStallGuard`
    owns the one instance; None: nowhere), through the record's two calls, each through one
    frame (the issuer is read at a fixed depth). The calls are made untraced at activation:
    untraced() loads Dynamo, which importing the package must not do, and nothing is
    recorded before a log is active.

    The recording function of each collective is built once per process: reinstalled, not
    rebuilt, so that a compiled frame's guard on ``dist.all_reduce`` holds across runs."""

    def __init__(self):
        self.active: Optional[CollectiveLog] = None
        self.record = through_one_frame(CollectiveLog.record_call)
        self.take_back = through_one_frame(CollectiveLog.take_back)
        self._functions: Dict[str, Callable] = {}

    def activate(self, log: Optional[CollectiveLog]) -> None:
        """Makes ``log`` the one the recording functions write to (None: record nothing,
        and torch's own functions back in ``torch.distributed``)."""
        if log is not None:
            self.record_collectives()
        self.active = log
        if log is None:
            self.restore_collectives()

    def deactivate(self, log: CollectiveLog) -> None:
        """Stops recording into ``log``, if it is the active one; with no log active any
        more, ``torch.distributed`` holds torch's own functions again."""
        if self.active is log:
            self.active = None
            self.restore_collectives()

    def record_collectives(self) -> None:
        """Replaces the collective functions of ``torch.distributed`` with recording ones;
        they call the originals, and record only while a log is active."""
        for op in COLLECTIVE_FUNCTIONS:
            current = getattr(dist, op, None)
            if current is None or hasattr(current, 'ddp_guard_original'):
                continue
            recording = self._functions.get(op)
            if recording is None or recording.ddp_guard_original is not current:
                recording = self._functions[op] = _recording(op, current, self)
            setattr(dist, op, recording)
        self.record = untraced(CollectiveLog.record_call)
        self.take_back = untraced(CollectiveLog.take_back)
        self._not_compiled_on_their_own()

    def restore_collectives(self) -> None:
        """Puts torch's functions back where the recording ones are (a function someone
        else put in their place since stays)."""
        for op, recording in self._functions.items():
            if getattr(dist, op, None) is recording:
                setattr(dist, op, recording.ddp_guard_original)

    def _not_compiled_on_their_own(self) -> None:
        """Has Dynamo run the recording functions (one code object) as plain Python where
        it meets them outside a trace (after a graph break), instead of compiling each as a
        frame of its own: one frame more than without the guard, which would also fold
        ``is_compiling()`` and leave the call unrecorded. Dynamo still inlines them into the
        frames it traces. The record's wrapper is marked alike: Dynamo would only skip it
        at its first call (a frame counted that the guard off does not have), and so is
        ``is_compiling`` (torch 2.0 to 2.2 count its frame: no tensor, skipped). Done at
        each activation: ``torch._dynamo.reset()`` may forget the marks."""
        eval_frame = getattr(getattr(torch, '_dynamo', None), 'eval_frame', None) \
            if hasattr(torch, 'compile') else None
        skip_code = getattr(eval_frame, 'skip_code', None)
        if skip_code is None:
            return  # torch 1.x: no compiler
        for function in (self._functions.get(op) for op in COLLECTIVE_FUNCTIONS):
            if function is not None:
                skip_code(function.__code__)
                break
        skip_code(self.record.__code__)
        if hasattr(is_compiling, '__code__'):
            skip_code(is_compiling.__code__)


def _recording(op: str, original, recording: CollectiveRecording):
    """The recording function of ``op``, which calls ``original``.

    Under ``torch.compile``: Dynamo inlines it, and since ``is_compiling()`` comes first
    it traces the original call alone, guarding on nothing of the record. What Dynamo can
    rewrite into its graph (``traceable_collective_remaps``: all_reduce, all_gather, ...,
    with ``async_op=False``) is compiled as without the guard and not recorded, on every
    rank alike. Where it cannot (``async_op=True``, broadcast, barrier, the ``*_object``
    forms), it breaks the graph at the caller's call, where it breaks without the guard,
    and runs this function outside the graph; Dynamo never compiles it as a frame of its
    own (:meth:`CollectiveRecording._not_compiled_on_their_own`), so it runs as without a
    compiler: it records, and Dynamo evaluates the original call as it does without the
    guard. The record itself is never traced (``recording.record``)."""
    @functools.wraps(original)
    def collective(*args, **kwargs):
        if is_compiling():
            return original(*args, **kwargs)
        log = recording.active
        if log is None:
            return original(*args, **kwargs)
        # _issuer reads the caller four frames up: itself, record_call, the record's one
        # frame, this one.
        entry = recording.record(log, op, args, kwargs)
        try:
            return original(*args, **kwargs)
        except BaseException:
            if entry is not None:
                recording.take_back(log, entry)
            raise
    collective.ddp_guard_original = original
    # Pickled by reference, as torch's are: ``torch.distributed.<op>`` is this function
    # while it is installed (functools.wraps named c10d's module, which holds the original).
    collective.__module__ = dist.__name__
    collective.__qualname__ = op
    return collective

