"""Starting a wrapper's stall guard: its option checked where the adapter reads it, and
its watchdog built on the run's own store, one per process: the newest wrapper's.
"""
import itertools
import os
import weakref
from typing import Callable, Optional

import torch.distributed as dist

from ..messages.config_lines import ConfigLines
from ..messages.stall_guard_text import stall_guard_moved, stall_timeout_error
from .collective_log import global_ranks
from .rank_position import RankPosition
from .recording_functions import activate, deactivate
from .stall_watchdog import StallWatchdog
from .store_protocol import KEY_PREFIX, StallStore

#: Backends whose collectives block the calling thread until every rank has joined.
BLOCKING_BACKENDS = ('gloo', )
#: Tells the guard that collectives do not block the host, whatever the backend (``1``):
#: a gloo run then judges as an NCCL run does (the tests emulate NCCL with it).
NONBLOCKING_ENV = 'MMDET3D_DDP_GUARD_NONBLOCKING_COLLECTIVES'


class _ProcessWatchdog:
    """The watchdog of this process and the class name of the model it watches, held
    weakly: a wrapper collected without stop() leaves none."""

    def __init__(self):
        self._held: Optional['weakref.ref'] = None
        self.model = ''

    def live(self) -> Optional[StallWatchdog]:
        watchdog = self._held() if self._held is not None else None
        return None if watchdog is None or watchdog.stopped else watchdog

    def hold(self, watchdog: StallWatchdog, model: str) -> None:
        self._held, self.model = weakref.ref(watchdog), model


_PROCESS_WATCHDOG = _ProcessWatchdog()


def watch_ranks(position: RankPosition, timeout: Optional[float],
                log: Callable[[str, bool], None], process_group, lines: ConfigLines,
                model: str) -> Optional['StallWatchdog']:
    """A wrapper's watchdog, started, with this rank's collectives recorded into
    ``position``; None when the stall guard is off (``timeout`` None) or the group has one
    rank (nobody to wait for).

    A process has one watchdog, the newest wrapper's: a watchdog that another wrapper of
    the process still runs is stopped, and ``log`` says so in the user's ``lines`` (a sweep
    or a notebook builds the wrapper that trains next while the last one is alive). A
    wrapper that does not train keeps it where it is with ``stall_timeout=None``. ``model``
    is the wrapped model's class name, which the warning names."""
    if timeout is None or dist.get_world_size(process_group) < 2:
        return None
    earlier = _PROCESS_WATCHDOG.live()
    if earlier is not None:
        earlier.stop()
        log(stall_guard_moved(lines, _PROCESS_WATCHDOG.model, model), False)
    # Ranks build their wrappers in the same order: the n-th one shares its keys. Global
    # ranks name them: every group's members share the default store.
    store = StallStore(dist.PrefixStore(f'{KEY_PREFIX}{next(_WATCHDOGS_BUILT)}/',
                                        _default_store()),
                       dist.get_rank(process_group), global_ranks(process_group))
    watchdog = StallWatchdog(position, timeout, log, store, collectives_block(process_group),
                             lines)
    _PROCESS_WATCHDOG.hold(watchdog, model)
    activate(position.collectives)
    # A wrapper collected without stop() (a benchmark's, a test's) records nothing after.
    weakref.finalize(watchdog, deactivate, position.collectives)
    watchdog.start()
    return watchdog


def collectives_block(process_group) -> bool:
    """Whether the group's collectives block the host until every rank has joined: gloo's
    do; NCCL's (and every other backend's, to be safe) return at once."""
    if os.environ.get(NONBLOCKING_ENV) == '1':
        return False
    return dist.get_backend(process_group) in BLOCKING_BACKENDS


def check_stall_timeout(timeout, lines: ConfigLines) -> None:
    """At the adapter's boundary, where the option is read (the watchdog trusts it)."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(stall_timeout_error(timeout, lines))


_WATCHDOGS_BUILT = itertools.count()


def _default_store():
    """The store of the default process group: private, as torch has no public accessor,
    and present on every torch the import accepts (1.9.1 to 2.14.1 run the stall tests)."""
    return dist.distributed_c10d._get_default_store()
