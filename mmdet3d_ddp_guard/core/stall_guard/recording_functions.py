"""The recording functions that replace ``torch.distributed``'s collectives.

They call torch's originals, and append to the one active
:class:`~.collective_log.CollectiveLog` (the stall guard's of this process) while there is
one; under a ``torch.compile`` trace they record nothing, so that Dynamo compiles what it
compiles without the guard.
"""
import functools
from typing import Optional

import torch
import torch.distributed as dist

from ..ddp_compat import is_compiling
from .collective_log import COLLECTIVE_FUNCTIONS, CollectiveLog

# The log of the guarded wrapper whose stall guard runs in this process (one at a time).
_active: Optional[CollectiveLog] = None


def activate(log: Optional[CollectiveLog]) -> None:
    """Makes ``log`` the one the recording functions write to (None: record nothing)."""
    global _active
    if log is not None:
        record_collectives()
    _active = log


def deactivate(log: CollectiveLog) -> None:
    """Stops recording into ``log``, if it is the active one."""
    global _active
    if _active is log:
        _active = None


def _recording(op: str, original):
    @functools.wraps(original)
    def collective(*args, **kwargs):
        # is_compiling() first: under a trace Dynamo folds it and never reads the log, so
        # it traces the original call alone.
        if not is_compiling() and _active is not None:
            return _recorded_call(_active, op, original, args, kwargs)
        return original(*args, **kwargs)
    collective.ddp_guard_original = original
    return _as_dynamo_sees(original, collective)


def _recorded_call(log: CollectiveLog, op: str, original, args: tuple, kwargs: dict):
    entry = log.record_call(op, args, kwargs)
    try:
        return original(*args, **kwargs)
    except BaseException:
        if entry is not None:
            log.take_back(entry)
        raise


def _as_dynamo_sees(original, collective):
    """``collective`` such that ``torch.compile`` does with it what it does with
    ``original``: Dynamo traces the collectives it can rewrite into its graph
    (``traceable_collective_remaps``, which grew from torch 2.1 to 2.13) through the
    recording function, which it inlines; at any other it breaks the graph, and would then
    compile the recording function as a frame of its own (one frame more than without the
    guard, seen on torch 2.1), so that one is disabled for Dynamo: the break falls where it
    fell."""
    dynamo = getattr(torch, '_dynamo', None)
    if dynamo is None or not hasattr(dynamo, 'disable'):
        return collective  # torch 1.x: no compiler
    try:
        from torch.distributed._functional_collectives import traceable_collective_remaps
    except ImportError:
        traceable_collective_remaps = {}
    if original in traceable_collective_remaps:
        return collective
    disabled = dynamo.disable(collective)
    disabled.ddp_guard_original = original
    return disabled


def record_collectives() -> None:
    """Replaces the collective functions of ``torch.distributed`` with recording ones,
    once per process; they call the originals, and record only while a log is active."""
    for op in COLLECTIVE_FUNCTIONS:
        original = getattr(dist, op, None)
        if original is not None and not hasattr(original, 'ddp_guard_original'):
            setattr(dist, op, _recording(op, original))
