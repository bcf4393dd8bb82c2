"""This rank's stall position (iteration, phase, collectives issued), kept in memory by the
training thread and read by the watchdog only when it stops moving.

Every update is a few attribute writes and one integer increment, from the training thread:
no clock, no I/O, no collective, and no module hook (a hook that changes a Python value makes
Dynamo recompile the module at every call). The stall watchdog compares
:attr:`RankPosition.moves` between its ticks; only once it has not changed for the stall
timeout does it take a :meth:`RankPosition.snapshot`: the iteration and phase, this rank's
collectives (:class:`~.collective_log.CollectiveLog`), and the training thread's Python stack,
which on a backend whose collectives block the host shows the collective it waits in.
"""
import os
import sys
import threading
import traceback
import weakref
from typing import Dict, Optional

import torch.distributed as dist
import torch.nn as nn

from .collective_log import CollectiveLog, short_path
from .phases import Phase
from .process_stall_guard import PROCESS_STALL_GUARD

_TORCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(dist.__file__)))
_COLLECTIVE_FILES = (os.path.join(_TORCH_DIR, 'distributed') + os.sep,
                     os.path.join(_TORCH_DIR, 'nn', 'parallel', 'distributed.py'))
# c10d's wrappers around every collective (logging, exception tracing), not the collective.
_WRAPPER_FUNCTIONS = ('wrapper', '_exception_logger', 'inner', 'log_time')
# The guard's recording functions, left out of the stack read.
_RECORDING_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               'recording_functions.py')


class RankPosition:
    """This rank's iteration, phase and collectives, for the stall watchdog.

    The phases (:class:`~.phases.Phase`): 'starting' (built, not stepped yet), 'data'
    (loading the next batch and the hooks before an iteration), 'forward', 'backward',
    'settling' (the completion of unused parameters), 'optimizer step', 'hooks' (the rest of
    the iteration), 'validation', 'checkpoint'.

    Args:
        model (nn.Module): The wrapped model, whose submodules name the collectives' issuers.
    """

    def __init__(self, model: nn.Module):
        self.moves = 0
        self.iteration = -1
        self.phase = Phase.STARTING
        self.error: Optional[str] = None
        self.collectives = CollectiveLog(model)
        self._thread_id = threading.get_ident()  # the training thread builds the wrapper
        self._self_ref = weakref.ref(self)

    def start_forward(self, iteration: int) -> None:
        PROCESS_STALL_GUARD.stepped(self._self_ref)
        self.iteration = iteration
        self.collectives.start_iteration(iteration)
        self.error = None  # an error that the training loop caught and went on after
        self.phase = Phase.FORWARD
        self.moves += 1

    def enter(self, phase: Phase) -> None:
        self.phase = phase
        self.moves += 1

    def progress(self) -> int:
        """Grows whenever the rank moves: a phase, a validation iteration, a collective."""
        return self.moves + self.collectives.total

    def is_current(self) -> bool:
        """Whether the training thread works for this position: no other wrapper of this
        process has stepped since this one did (a benchmark or a test holds several)."""
        return PROCESS_STALL_GUARD.steps_for(self._self_ref)

    def move(self) -> None:
        """Progress inside a phase (a validation iteration)."""
        self.moves += 1

    def raised(self, error: BaseException) -> None:
        first_line = (str(error).strip().splitlines() or [''])[0]
        self.error = f'{type(error).__name__}: {first_line[:300]}'
        self.moves += 1

    def snapshot(self) -> dict:
        """What the other ranks need to judge where this rank is (JSON-ready): ``groups``
        holds this rank's collectives per process group, ``call`` the collective the
        training thread's stack is in (None outside one). The phase is its plain string,
        as every rank reads it back from the store."""
        return dict(iteration=self.iteration, phase=str(self.phase), error=self.error,
                    call=self._collective_on_stack(), groups=self.collectives.snapshot(),
                    moves=self.moves, pid=os.getpid())

    def _collective_on_stack(self) -> Optional[Dict[str, str]]:
        """The torch.distributed call the training thread is in, and the code outside
        torch that called it."""
        frame = sys._current_frames().get(self._thread_id)
        if frame is None:
            return None
        stack = [entry for entry in traceback.extract_stack(frame)
                 if entry.filename != _RECORDING_FILE]
        inner = 0
        while inner < len(stack) and stack[-1 - inner].filename.startswith(_COLLECTIVE_FILES):
            inner += 1
        if inner == 0:
            return None
        calls = [entry for entry in stack[len(stack) - inner:]
                 if entry.name not in _WRAPPER_FUNCTIONS] or stack[len(stack) - inner:]
        innermost = calls[-1]
        op = (f"DDP's {innermost.name}" if innermost.filename.startswith(_COLLECTIVE_FILES[1])
              else innermost.name)
        callers = [entry for entry in stack[:len(stack) - inner]
                   if not entry.filename.startswith(_TORCH_DIR + os.sep)]
        where = (f'{short_path(callers[-1].filename)}:{callers[-1].lineno} in '
                 f'{callers[-1].name}' if callers else 'torch')
        return dict(op=op, where=where)
