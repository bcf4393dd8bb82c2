"""Starting a wrapper's stall guard: its option checked where the adapter reads it, and
its watchdog built on the run's own store, one per process: the newest wrapper's.
"""
import os
from typing import Callable, Optional

import torch.distributed as dist

from ..messages.config_lines import ConfigLines
from ..messages.stall_guard_text import stall_guard_moved, stall_timeout_error
from .collective_log import global_ranks
from .process_stall_guard import PROCESS_STALL_GUARD
from .rank_position import RankPosition
from .stall_watchdog import StallWatchdog
from .store_protocol import KEY_PREFIX, StallStore

#: Backends whose collectives block the calling thread until every rank has joined.
BLOCKING_BACKENDS = ('gloo', )
#: Tells the guard that collectives do not block the host, whatever the backend (``1``):
#: a gloo run then judges as an NCCL run does (the tests emulate NCCL with it).
NONBLOCKING_ENV = 'MMDET3D_DDP_GUARD_NONBLOCKING_COLLECTIVES'


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
    # Global ranks name the keys: every group's members share the default store.
    prefix = f'{KEY_PREFIX}{PROCESS_STALL_GUARD.next_store_prefix()}/'
    store = StallStore(dist.PrefixStore(prefix, _default_store()),
                       dist.get_rank(process_group), global_ranks(process_group))
    watchdog = StallWatchdog(position, timeout, log, store, collectives_block(process_group),
                             lines)
    stopped_model = PROCESS_STALL_GUARD.install(watchdog, model)
    if stopped_model is not None:
        log(stall_guard_moved(lines, stopped_model, model), False)
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


def _default_store():
    """The store of the default process group: private, as torch has no public accessor,
    and present on every torch the import accepts (1.9.1 to 2.14.1 run the stall tests)."""
    return dist.distributed_c10d._get_default_store()
