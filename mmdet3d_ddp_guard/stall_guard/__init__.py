"""The stall guard: a hang between ranks becomes a named error on every rank.

Framework-free (torch and the standard library): the adapters (MMEngine's
:class:`~mmdet3d_ddp_guard.GuardedDDP` and
:class:`~mmdet3d_ddp_guard.openmmlab2.hooks.StallPhaseHook`, mmcv 1.x's
:class:`~mmdet3d_ddp_guard.openmmlab1.GuardedMMDistributedDataParallel`) only start it
(:func:`watch_ranks`), move the position and log.
"""
from .collective_log import CollectiveLog
from .guard_start import NONBLOCKING_ENV, check_stall_timeout, collectives_block, watch_ranks
from .phases import Phase
from .rank_position import RankPosition
from .stall_diagnosis import Diagnosis, diagnose
from .stall_watchdog import StallWatchdog
from .store_protocol import KEY_PREFIX

#: Seconds without movement before a rank publishes its position (GuardedDDP's default).
DEFAULT_STALL_TIMEOUT = 180.0

__all__ = ['CollectiveLog', 'Phase', 'RankPosition', 'Diagnosis', 'diagnose', 'StallWatchdog',
           'KEY_PREFIX', 'NONBLOCKING_ENV', 'DEFAULT_STALL_TIMEOUT', 'check_stall_timeout',
           'collectives_block', 'watch_ranks']
