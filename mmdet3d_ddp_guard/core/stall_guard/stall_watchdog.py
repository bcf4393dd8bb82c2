"""The thread that turns a hang into a named error on every rank.

While training runs, the watchdog wakes every ``tick`` seconds and compares one integer
(:meth:`RankPosition.progress`) with the value it saw last: no store I/O, no collective,
nothing on the training thread. Only when its rank has not moved for ``timeout`` seconds
does it use the c10d store the run already has (under the key prefix
``mmdet3d_ddp_guard/stall/``):

1. it publishes this rank's snapshot (again only when it changed), and reads the other
   ranks' for up to ``answer_wait`` seconds, at growing intervals (a rank that has not
   published by then is named as not answering);
2. it judges them (:func:`diagnose`). Waiting that can end is logged once per stall and the
   run goes on; the next judgement comes after 2, 4, 8 ... times the timeout (at most
   :data:`MAX_BACKOFF`), and costs one store operation when no rank has published since
   (a shared counter of changes). When the rank moves again its snapshot is withdrawn;
3. positions that cannot meet end the run: the first rank to judge so publishes its
   diagnosis, every rank logs that same text, runs the exit callbacks (the hook's files),
   waits for a checkpoint this rank is writing (at most :data:`CHECKPOINT_WAIT`), writes
   torchrun's error file, waits up to ``answer_wait`` for the other ranks to have read the
   verdict (rank 0's process may host the store), and exits with code 1: the training
   thread, blocked in C++, cannot be raised into.

A rank whose training step raises publishes its error (a few store operations) and the
error goes on up at once, with its traceback, as without the guard: torchrun then ends the
other ranks, and any rank whose watchdog fires first names the error.

Only the first guarded wrapper of a process that is alive has a watchdog: a second one (an
evaluation model wrapped too) never judges.
"""
import itertools
import json
import os
import sys
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional, Set

import torch.distributed as dist

from ..config_lines import ConfigLines
from .recording_functions import activate, deactivate
from .rank_position import RankPosition
from .stall_diagnosis import diagnose

KEY_PREFIX = 'mmdet3d_ddp_guard/stall/'
EXIT_CODE = 1
#: The longest wait between two judgements of one stall, in seconds.
MAX_BACKOFF = 600.0
#: The longest a stop waits for a checkpoint that its rank is writing, in seconds.
CHECKPOINT_WAIT = 120.0
#: Backends whose collectives block the calling thread until every rank has joined.
BLOCKING_BACKENDS = ('gloo', )
#: Tells the guard that collectives do not block the host, whatever the backend (``1``):
#: a gloo run then judges as an NCCL run does (the tests emulate NCCL with it).
NONBLOCKING_ENV = 'MMDET3D_DDP_GUARD_NONBLOCKING_COLLECTIVES'
_MOVING = json.dumps(dict(moving=True))

# The watchdog of this process, while its wrapper lives: a second wrapper gets none.
_live_watchdog: Optional['weakref.ref'] = None


def watch_ranks(position: RankPosition, timeout: Optional[float],
                log: Callable[[str, bool], None],
                process_group) -> Optional['StallWatchdog']:
    """A wrapper's watchdog, started, with this rank's collectives recorded into
    ``position``; None when the stall guard is off (``timeout`` None), the group has one
    rank (nobody to wait for), or another wrapper of this process has the watchdog."""
    global _live_watchdog
    if timeout is None or dist.get_world_size(process_group) < 2:
        return None
    if _live_watchdog is not None and _live_watchdog() is not None:
        return None
    watchdog = StallWatchdog(position, timeout, log, process_group)
    _live_watchdog = weakref.ref(watchdog)
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
        raise ValueError(f'{lines.wrapper}: stall_timeout must be a positive number of '
                         f'seconds, or None to turn the stall guard off, not {timeout!r}; '
                         f'e.g. {lines.option("stall_timeout", 600)}')


def default_answer_wait(timeout: float) -> float:
    """Long enough for every stalled rank to publish, short against the stall timeout."""
    return min(30.0, max(2.0, timeout / 2))


class StallWatchdog:
    """Watches one rank's position; see the module's docstring.

    Args:
        position (RankPosition): This rank's position, updated by the training thread.
        timeout (float): Seconds without movement before the rank publishes its position.
        log (callable): ``log(message, is_error)``; the adapter's logger.
        process_group: The group whose ranks are compared (default: the world).
    """

    def __init__(self, position: RankPosition, timeout: float,
                 log: Callable[[str, bool], None], process_group=None):
        self.position = position
        self.timeout = float(timeout)
        self.answer_wait = default_answer_wait(self.timeout)
        self.tick = min(1.0, self.timeout / 10)
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        # Global ranks address the store: every group's members share the default store.
        self._global_ranks = _global_ranks(process_group, self.world_size)
        self._store = None  # the default group's, prefixed; opened at the first stall
        self._log = log
        self._exit_callbacks: List[Callable[[], None]] = []
        #: Store operations so far (the budget tests read it: none while nothing stalls).
        self.store_operations = 0
        # Ranks build their wrappers in the same order: the n-th one shares its keys.
        self._prefix = f'{next(_WATCHDOGS_BUILT)}/'
        self._published = False
        # What this stall has logged already: another rank that moves and stalls again
        # while this one stays still must not make it repeat itself.
        self._logged: Set[str] = set()
        self._stopped = False
        self._ending = False
        self.blocking = collectives_block(process_group)
        self._last_progress = position.progress()
        self._backoff = self.timeout
        self._judge_at = time.monotonic() + self.timeout
        # The published snapshot's place and progress, and the change count the last
        # judgement read.
        self._published_place: Optional[tuple] = None
        self._published_progress: Optional[int] = None
        self._changes_judged: Optional[int] = None

    def start(self) -> None:
        # The thread holds the watchdog weakly: it ends when the wrapper is collected.
        threading.Thread(target=_watch, args=(weakref.ref(self), self.tick), daemon=True,
                         name='mmdet3d_ddp_guard-stall-watchdog').start()

    def stop(self) -> None:
        """Ends the thread, and withdraws this rank's snapshot (the end of a run)."""
        global _live_watchdog
        self._stopped = True
        deactivate(self.position.collectives)
        if _live_watchdog is not None and _live_watchdog() is self:
            _live_watchdog = None  # a wrapper built after the end of this run gets one
        if self._published:
            try:
                self._withdraw()  # the thread may not tick again before it sees the stop
            except Exception:  # noqa: B902 - the run is over; the store may be gone
                pass

    def add_exit_callback(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs on this thread before a stall ends the run (flush files)."""
        self._exit_callbacks.append(callback)

    # -- the thread ---------------------------------------------------------------------

    def look(self) -> None:
        """One tick: an integer compared while the rank moves; the store once it stalls.
        A store operation that fails is logged once per stall and tried again later: the
        thread never ends while its wrapper trains."""
        progress = self.position.progress()
        now = time.monotonic()
        if progress != self._last_progress or not self.position.is_current():
            self._last_progress = progress
            self._backoff, self._judge_at = self.timeout, now + self.timeout
        if self._published and (progress != self._published_progress
                                or not self.position.is_current()):
            # A snapshot left in the store after the rank moved would be read by the others
            # as this rank stuck where it was: withdrawn before anything else, every tick
            # until the store takes it.
            self._store_operation(self._withdraw)
            return
        if now < self._judge_at:
            return
        self._store_operation(self._judge_stall)
        self._backoff = min(2 * self._backoff, MAX_BACKOFF)
        self._judge_at = time.monotonic() + self._backoff

    def _store_operation(self, operation: Callable[[], None]) -> None:
        try:
            operation()
        except Exception as error:  # noqa: B902 - a broken store must not kill training
            message = (f'mmdet3d_ddp_guard stall guard: cannot compare positions through the '
                       f'store ({type(error).__name__}: {error}); it tries again later.')
            if 'store fault' not in self._logged:
                self._log(message, True)
                self._logged.add('store fault')

    def _judge_stall(self) -> None:
        snapshot = self.position.snapshot()
        if _place(snapshot) != self._published_place:
            self._publish(snapshot)
        changes = self._add('changes', 0)
        if changes == self._changes_judged:
            return  # nobody published since the last judgement: the same verdict
        verdict = self._read('verdict')
        if verdict is not None:
            self._end_run(verdict.decode())
        positions = self._positions(snapshot, deadline=time.monotonic() + self.answer_wait)
        diagnosis = diagnose(positions, self.timeout, self.blocking)
        if diagnosis.stop:
            # A rank that moved withdraws its snapshot within a tick: read again after two,
            # so that no run ends on a stale position.
            time.sleep(2 * self.tick)
            confirmed = self._positions(self.position.snapshot(),
                                        deadline=time.monotonic() + self.answer_wait)
            if self.position.progress() != self._last_progress or any(
                    _place(positions[rank]) != _place(confirmed[rank]) for rank in positions):
                return
            self._end_run(self._agree_on(diagnosis.text))
        self._changes_judged = changes
        if diagnosis.text not in self._logged:
            self._log(diagnosis.text, False)
            self._logged.add(diagnosis.text)

    # -- a rank that raised ---------------------------------------------------------------

    def report_exception(self, error: BaseException) -> None:
        """From the training thread, before ``error`` goes on up: publishes it (a few store
        operations) so that the other ranks name it when their watchdogs fire, and
        returns at once."""
        if self._ending:
            # The other ranks' exits broke this rank's collective; the watchdog is about
            # to end this process with the diagnosis: no second story on top of it.
            time.sleep(2 * self.answer_wait + CHECKPOINT_WAIT)
            return
        self.position.raised(error)
        try:
            self._publish(self.position.snapshot())
        except Exception as store_error:  # noqa: B902 - the user's error comes first
            self._log(f'mmdet3d_ddp_guard stall guard: could not tell the other ranks of this '
                      f"rank's error ({type(store_error).__name__}: {store_error}).", True)

    # -- the store --------------------------------------------------------------------------

    def _key_store(self):
        if self._store is None:
            self._store = dist.PrefixStore(KEY_PREFIX + self._prefix, _default_store())
        return self._store

    def _add(self, key: str, amount: int) -> int:
        self.store_operations += 1
        return self._key_store().add(key, amount)

    def _set(self, key: str, value: str) -> None:
        self.store_operations += 1
        self._key_store().set(key, value)
        # Readers ask this counter first: Store.check is torch >= 1.10, and a timed-out
        # wait leaves torch 1.9's TCPStore client broken ("Socket Timeout" at the next call).
        self._add(f'{key}.written', 1)

    def _read(self, key: str) -> Optional[bytes]:
        if self._add(f'{key}.written', 0) == 0:
            return None
        self.store_operations += 1
        return self._key_store().get(key)

    def _publish(self, snapshot: dict) -> None:
        self._published_progress = self.position.progress()
        self._set(f'position/{self._global_ranks[self.rank]}', json.dumps(snapshot))
        self._published = True  # from here a failed write still needs withdrawing
        self._add('changes', 1)
        self._published_place = _place(snapshot)

    def _withdraw(self) -> None:
        self._set(f'position/{self._global_ranks[self.rank]}', _MOVING)
        self._add('changes', 1)
        self._published = False
        self._published_place = None
        self._changes_judged = None
        self._logged.clear()

    def _positions(self, snapshot: dict, deadline: float) -> Dict[int, Optional[dict]]:
        """Every rank's snapshot (this rank's ``snapshot``), None for ranks that have not
        answered by ``deadline``; the unanswered ones are read again at doubling
        intervals, so that a rank that never answers costs a few reads, not one a tick."""
        positions: Dict[int, Optional[dict]] = {self.rank: snapshot}
        interval = self.tick
        while True:
            for rank in range(self.world_size):
                if positions.get(rank) is None:
                    raw = self._read(f'position/{self._global_ranks[rank]}')
                    answer = json.loads(raw) if raw is not None else None
                    positions[rank] = None if answer is None or answer.get('moving') \
                        else answer
            if all(p is not None for p in positions.values()) or time.monotonic() > deadline:
                return positions
            time.sleep(interval)
            interval *= 2

    def _agree_on(self, text: str) -> str:
        """The first rank's verdict, so that every rank logs the same words."""
        if self._add('verdict_claims', 1) == 1:
            self._set('verdict', text)
            self._add('changes', 1)  # ranks that judged already read the verdict next time
            return text
        deadline = time.monotonic() + self.answer_wait
        while time.monotonic() < deadline:
            verdict = self._read('verdict')
            if verdict is not None:
                return verdict.decode()
            time.sleep(self.tick / 4)
        return text

    def _wait_until_read(self) -> None:
        """Counts this rank out and waits (bounded) for every rank to have done so."""
        ended = self._add('ended', 1)
        deadline = time.monotonic() + self.answer_wait
        while ended < self.world_size and time.monotonic() < deadline:
            time.sleep(self.tick / 4)
            ended = self._add('ended', 0)

    def _end_run(self, text: str) -> None:
        self._ending = True
        self._log(text, True)
        self._wait_for_checkpoint(CHECKPOINT_WAIT)
        for callback in self._exit_callbacks:
            try:
                callback()
            except Exception as error:  # noqa: B902 - the exit must happen
                self._log(f'mmdet3d_ddp_guard stall guard: an exit callback failed: '
                          f'{type(error).__name__}: {error}', True)
        _write_torchelastic_error_file(text)
        try:
            self._wait_until_read()
        except Exception:  # noqa: B902 - the store's host may be gone already
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_CODE)


    def _wait_for_checkpoint(self, bound: float) -> None:
        """Lets a checkpoint that this rank is writing finish, at most ``bound`` seconds:
        an exit in the middle would leave a half-written file."""
        deadline = time.monotonic() + bound
        while self.position.phase == 'checkpoint' and time.monotonic() < deadline:
            time.sleep(self.tick)


_WATCHDOGS_BUILT = itertools.count()


def _place(snapshot: Optional[dict]) -> Optional[tuple]:
    """What must not change between two readings of a stalled rank (its stack included:
    a thread that computes inside torch.distributed code shows a different line)."""
    if snapshot is None:
        return None
    return (snapshot['moves'], snapshot['phase'], snapshot['error'],
            json.dumps(snapshot['call']), json.dumps(snapshot['groups']))


def _watch(watchdog_ref, tick: float) -> None:
    while True:
        time.sleep(tick)
        watchdog = watchdog_ref()
        if watchdog is None or watchdog._stopped:
            return
        try:
            watchdog.look()
        except Exception as error:  # noqa: B902 - the guard must outlive its own faults
            watchdog._log(f'mmdet3d_ddp_guard stall guard: {type(error).__name__}: {error}; '
                          'it goes on watching.', True)
        del watchdog


def _global_ranks(process_group, world_size: int) -> List[int]:
    if process_group is None or process_group is dist.group.WORLD:
        return list(range(world_size))
    # Public from torch 2.0; the private name before.
    to_global = getattr(dist.distributed_c10d, 'get_global_rank', None) \
        or dist.distributed_c10d._get_global_rank
    return [to_global(process_group, rank) for rank in range(world_size)]


def _default_store():
    """The store of the default process group: private, as torch has no public accessor,
    and present on every torch the import accepts (1.9.1 to 2.14.1 run the stall tests)."""
    return dist.distributed_c10d._get_default_store()


def _write_torchelastic_error_file(text: str) -> None:
    """torchrun shows this file in its ChildFailedError summary instead of '<N/A>' (what
    it shows for a worker that exited without a Python traceback)."""
    path = os.environ.get('TORCHELASTIC_ERROR_FILE')
    if not path or os.path.exists(path):
        return
    # torchrun prints the call stack, not the message, in its summary.
    message = dict(message=text, extraInfo=dict(py_callstack=text,
                                                 timestamp=str(int(time.time()))))
    try:
        with open(path, 'w') as file:
            json.dump(dict(message=message), file)
    except OSError:
        pass

