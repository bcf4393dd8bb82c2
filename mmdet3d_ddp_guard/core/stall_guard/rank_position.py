"""Where this rank is in the training loop: kept in memory, read only when it stops moving.

Every update is a few attribute writes and one integer increment, from the training thread:
no clock, no I/O, no collective. The stall watchdog compares :attr:`RankPosition.moves`
between its ticks; only once it has not changed for the stall timeout does it take a
:meth:`RankPosition.snapshot` (which also reads the training thread's Python stack, to see a
collective that no hooked module announced) and publish it.
"""
import os
import sys
import threading
import traceback
import weakref
from typing import Dict, Optional, Tuple

import torch.distributed as dist
import torch.nn as nn

from ..forward_collectives import forward_collective_modules

#: Phases whose wait is DDP's gradient all-reduce (a rank stalled there waits in it).
GRADIENT_PHASES = ('backward', 'settling')

_TORCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(dist.__file__)))
_COLLECTIVE_FILES = (os.path.join(_TORCH_DIR, 'distributed') + os.sep,
                     os.path.join(_TORCH_DIR, 'nn', 'parallel', 'distributed.py'))
# c10d's wrappers around every collective (logging, exception tracing), not the collective.
_WRAPPER_FUNCTIONS = ('wrapper', '_exception_logger', 'inner', 'log_time')


# The position of the wrapper that stepped last in this process: the training thread is its.
_stepping: Optional['weakref.ref'] = None


class RankPosition:
    """This rank's iteration, phase and forward collectives, for the stall watchdog.

    The phases: 'starting' (built, not stepped yet), 'data' (loading the next batch and the
    hooks before an iteration), 'forward', 'backward', 'settling' (GuardedDDP's completion
    of unused parameters), 'optimizer step', 'hooks' (the rest of the iteration),
    'validation', 'checkpoint'.

    Args:
        process_group: The group whose collective sequence number goes into the snapshot
            (torch's private ``_get_sequence_number_for_group``, where it exists).
    """

    def __init__(self, process_group=None):
        self.moves = 0
        self.iteration = -1
        self.phase = 'starting'
        self.inside: Optional[str] = None
        self.calls: Dict[str, int] = {}
        self.forward_done = False
        # The last iteration whose forward finished, and its collective calls per module.
        self.finished: Tuple[int, Dict[str, int]] = (-1, {})
        self.error: Optional[str] = None
        self.module_types: Dict[str, str] = {}
        self._process_group = process_group
        self._thread_id = threading.get_ident()  # the training thread builds the wrapper
        self._self_ref = weakref.ref(self)

    def follow_forward_collectives(self, model: nn.Module) -> None:
        """Hooks the layers ``forward_collectives`` knows (SyncBN and the like) to note when
        the forward enters and leaves each one."""
        for name, module in forward_collective_modules(model):
            self.module_types[name] = type(module).__name__
            module.register_forward_pre_hook(self._entering(name))
            module.register_forward_hook(self._leaving)

    def _entering(self, name: str):
        def enter(module, args):
            # In eval mode these layers use running statistics: no collective.
            if module.training:
                self.inside = name
                self.calls[name] = self.calls.get(name, 0) + 1
                self.moves += 1
        return enter

    def _leaving(self, module, args, output):
        self.inside = None
        self.moves += 1

    def start_forward(self, iteration: int) -> None:
        global _stepping
        _stepping = self._self_ref
        if self.forward_done:
            self.finished = (self.iteration, self.calls)
        self.iteration = iteration
        self.error = None  # an error that the training loop caught and went on after
        self.calls = {}
        self.forward_done = False
        self.inside = None
        self.phase = 'forward'
        self.moves += 1

    def enter(self, phase: str) -> None:
        if phase == 'backward':
            self.forward_done = True
        self.phase = phase
        self.moves += 1

    def is_current(self) -> bool:
        """Whether the training thread works for this position: no other wrapper of this
        process has stepped since this one did (a benchmark or a test holds several)."""
        return _stepping is None or _stepping is self._self_ref

    def move(self) -> None:
        """Progress inside a phase (a validation iteration)."""
        self.moves += 1

    def raised(self, error: BaseException) -> None:
        first_line = (str(error).strip().splitlines() or [''])[0]
        self.error = f'{type(error).__name__}: {first_line[:300]}'
        self.moves += 1

    def snapshot(self) -> dict:
        """What the other ranks need to judge where this rank is (JSON-ready).

        ``finished`` maps iterations whose forward is over to their collective calls per
        layer (a layer missing ran none); ``inside_call`` is which call of ``inside`` this
        rank waits in."""
        finished_iteration, finished_calls = self.finished
        finished = {str(finished_iteration): dict(finished_calls)}
        if self.forward_done:
            finished[str(self.iteration)] = dict(self.calls)
        inside = self.inside
        return dict(iteration=self.iteration,
                    phase=self.phase,
                    inside=inside, inside_call=self.calls.get(inside) if inside else None,
                    finished=finished, error=self.error, call=self._collective_on_stack(),
                    seq=self._sequence_number(), moves=self.moves, pid=os.getpid())

    def _sequence_number(self) -> Optional[int]:
        group = self._process_group or dist.group.WORLD
        try:
            return int(group._get_sequence_number_for_group())
        except (AttributeError, RuntimeError):
            return None

    def _collective_on_stack(self) -> Optional[Dict[str, str]]:
        """The torch.distributed call the training thread is in, and the code outside
        torch that called it."""
        frame = sys._current_frames().get(self._thread_id)
        if frame is None:
            return None
        stack = traceback.extract_stack(frame)
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
        where = (f'{_short_path(callers[-1].filename)}:{callers[-1].lineno} in '
                 f'{callers[-1].name}' if callers else 'torch')
        return dict(op=op, where=where)


def _short_path(path: str) -> str:
    """The same on every node: from the package folder on for installed code, else the
    path relative to the working directory."""
    marker = f'site-packages{os.sep}'
    if marker in path:
        return path.split(marker, 1)[1]
    relative = os.path.relpath(path)
    return path if relative.startswith('..') else relative
