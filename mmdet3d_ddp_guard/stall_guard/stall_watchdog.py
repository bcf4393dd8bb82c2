"""The thread that turns a hang into a named error on every rank: when to look, and what
to do with a verdict (the store's keys and operations are :mod:`.store_protocol`'s, the
judgement :mod:`.stall_diagnosis`'s, the exit :mod:`.run_end`'s).

While training runs, the watchdog wakes every ``tick`` seconds and compares one integer
(:meth:`RankPosition.progress`) with the value it saw last: no store I/O, no collective,
nothing on the training thread. Only when its rank has not moved for ``timeout`` seconds
does it use the c10d store the run already has:

1. it publishes this rank's snapshot, and from then on reads the verdict key at every tick
   (one operation), so that it acts on any rank's verdict within a tick;
2. it asks for a judgement: the first rank to claim the round reads every snapshot (waiting
   up to ``answer_wait`` for ranks that have not published; they are named as not
   answering), judges them (:func:`diagnose`) and writes the verdict. Waiting that can end
   is logged once per stall on every rank and the run goes on; the next judgement is asked
   for after 2, 4, 8 ... times the timeout (at most :data:`MAX_BACKOFF`), and only when a
   rank has published or withdrawn since (one operation). When the rank moves again its
   snapshot is withdrawn;
3. positions that cannot meet end the run: every rank logs the verdict's text and ends
   (:mod:`.run_end`: it waits while a rank writes a checkpoint, and until every rank has
   read the verdict, then exits with code 1).

A rank whose training step raises publishes its error (at most :data:`REPORT_WAIT` seconds,
on a thread of its own, so that a hung store cannot hold the error back) and the error goes
on up, with its traceback, as without the guard: torchrun then ends the other ranks, and
any rank whose watchdog fires first names the error. A process has one watchdog, the newest
wrapper's (:class:`~.process_stall_guard.ProcessStallGuard`).
"""
import json
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional, Set

from ..messages.config_lines import ConfigLines
from ..messages.stall_guard_text import own_fault, store_fault
from .phases import Phase
from .rank_position import RankPosition
from .process_stall_guard import PROCESS_STALL_GUARD
from .run_end import CHECKPOINT_WAIT, end_run
from .stall_diagnosis import diagnose
from .store_protocol import StallStore, Verdict

#: The longest wait between two judgements of one stall, in seconds.
MAX_BACKOFF = 600.0
#: The longest the training thread waits for its error to reach the store, in seconds.
REPORT_WAIT = 2.0
#: After store faults in a row, the watchdog tries again after 1, 2, 4 ... ticks, at most
#: this many: a store that struggles is not hammered by every rank at every tick.
MAX_FAULT_TICKS = 32


def default_answer_wait(timeout: float) -> float:
    """Long enough for every stalled rank to publish, short against the stall timeout."""
    return min(30.0, max(2.0, timeout / 2))


class StallWatchdog:
    """Watches one rank's position; see the module's docstring.

    Args:
        position (RankPosition): This rank's position, updated by the training thread.
        timeout (float): Seconds without movement before the rank publishes its position.
        log (callable): ``log(message, is_error)``; the adapter's logger.
        store (StallStore): This rank's side of the store protocol.
        blocking (bool): Whether the group's collectives block the host.
        lines (ConfigLines): The words of the framework that trains, for the diagnosis.
    """

    def __init__(self, position: RankPosition, timeout: float, log: Callable[[str, bool], None],
                 store: StallStore, blocking: bool, lines: ConfigLines):
        self.position = position
        self.timeout = float(timeout)
        self.answer_wait = default_answer_wait(self.timeout)
        self.tick = min(1.0, self.timeout / 10)
        self.store = store
        self.rank = store.rank
        self.blocking = blocking
        self.lines = lines
        self._log = log
        self._exit_callbacks: List[Callable[[], None]] = []
        # Serialises the store's use between this thread and report_exception's.
        self._lock = threading.Lock()
        #: Set by :meth:`stop`; a wrapper built after it gets a watchdog of its own.
        self.stopped = False
        self._faults_in_a_row = 0
        self._fault_pause = 0  # ticks left before the store is tried again
        self._ending = False
        self._last_progress = position.progress()
        self._still_since = time.monotonic()
        self._published_progress: Optional[int] = None
        self._published_reading: Optional[str] = None
        # This stall's state: what it logged already (another rank that moves and stalls
        # again while this one stays still must not make it repeat itself), the last
        # verdict read, the round it claimed and did not win, when to ask for a judgement.
        self._logged: Set[str] = set()
        self._verdict: Optional[Verdict] = None
        self._first_round = 0
        self._claimed: Optional[int] = None
        self._backoff = self.timeout
        self._judge_at = 0.0

    @property
    def store_operations(self) -> int:
        """Store operations so far (the budget tests read it: none while nothing stalls)."""
        return self.store.operations

    def start(self) -> None:
        # The thread holds the watchdog weakly: it ends when the wrapper is collected.
        threading.Thread(target=_watch, args=(weakref.ref(self), self.tick), daemon=True,
                         name='mmdet3d_ddp_guard-stall-watchdog').start()

    def stop(self) -> None:
        """Ends the thread and withdraws this rank's snapshot (a run's end, a newer wrapper)."""
        self.stopped = True
        PROCESS_STALL_GUARD.uninstall(self)
        if self._published_progress is not None:
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
        A store operation that fails is logged once per stall and tried again after a
        pause that doubles (:data:`MAX_FAULT_TICKS`): the thread never ends while its
        wrapper trains."""
        progress = self.position.progress()
        now = time.monotonic()
        current = self.position.is_current()
        if progress != self._last_progress or not current:
            self._last_progress, self._still_since = progress, now
        if self._fault_pause:
            self._fault_pause -= 1
            return
        if self._published_progress is not None and (progress != self._published_progress
                                                     or not current):
            # A snapshot left in the store after the rank moved would be read by the others
            # as this rank stuck where it was: withdrawn before anything else, until the
            # store takes it (its beat, the withdrawal's first operation, dates it already).
            self._store_operation(self._withdraw)
            return
        if now - self._still_since >= self.timeout:
            self._store_operation(self._stalled_tick)

    def _store_operation(self, operation: Callable[[], None]) -> None:
        try:
            with self._lock:
                operation()
            self._faults_in_a_row = 0
        except Exception as error:  # noqa: B902 - a broken store must not kill training
            self._faults_in_a_row += 1
            self._fault_pause = min(2 ** (self._faults_in_a_row - 1), MAX_FAULT_TICKS) - 1
            self._log_once(store_fault(error, MAX_FAULT_TICKS), True, key='store fault')

    def _stalled_tick(self) -> None:
        self._verdict = self.store.verdict()
        if self._published_progress is None:  # the first tick of this stall
            self._first_round = self._verdict.round + 1 if self._verdict else 0
            self._publish(self.position.snapshot())
            self._backoff, self._judge_at = self.timeout, 0.0
        self._act_on(self._verdict)
        if time.monotonic() >= self._judge_at:
            self._ask_for_judgement()

    def _act_on(self, verdict: Optional[Verdict]) -> None:
        if verdict is None:
            return
        if verdict.stop:  # from any round: the other ranks are leaving
            self._end_run(verdict)
        if verdict.round >= self._first_round and verdict.text:
            self._log_once(verdict.text, False)
        if self._claimed is not None and verdict.round >= self._claimed:
            self._claimed = None

    def _ask_for_judgement(self) -> None:
        snapshot = self.position.snapshot()
        if _reading(snapshot) != self._published_reading:
            self._publish(snapshot)  # the stack moved inside torch code: the new one
        verdict = self._verdict
        next_round = max(self._first_round, verdict.round + 1 if verdict else 0)
        if self._claimed is not None:
            # The round's judge has not answered within its time: it may have died.
            next_round = max(next_round, self._claimed + 1)
        elif verdict is not None and verdict.round >= self._first_round and \
                self.store.changes() == verdict.changes:
            self._back_off()  # nothing changed: the same verdict again
            return
        if self.store.claim(next_round):
            self._claimed = None
            self._judge(next_round, snapshot)
            self._back_off()
        else:
            self._claimed = next_round
            self._back_off(at_least=self.answer_wait + 4 * self.tick + 2.0)

    def _back_off(self, at_least: float = 0.0) -> None:
        """Next judgement after twice the last wait (:data:`MAX_BACKOFF` at most), or
        ``at_least`` after a claim lost (its judge may die)."""
        self._judge_at = time.monotonic() + max(self._backoff, at_least)
        self._backoff = min(2 * self._backoff, MAX_BACKOFF)

    def _judge(self, round_number: int, snapshot: dict) -> None:
        # Before the snapshots: a publication writes its snapshot, then counts it.
        changes = self.store.changes()
        positions = self.store.positions(snapshot, time.monotonic() + self.answer_wait,
                                         self.tick)
        verdict = self._verdict_on(round_number, positions, changes)
        if verdict.stop:
            # A rank that moved withdraws its snapshot within a tick: no run ends on a
            # position that changed meanwhile. A count that moved is checked against the
            # snapshots (a snapshot judged may just have counted itself).
            time.sleep(2 * self.tick)
            if self.position.progress() != self._last_progress or (
                    self.store.changes() != changes and self.store.changed(positions)):
                verdict = Verdict(round_number, -1, False, '')
            # A snapshot whose withdrawal the store took only in part is no evidence: its
            # rank counts as not answering, and another judgement is due.
            elif (stale := self.store.stale(positions)):
                verdict = self._verdict_on(round_number, {
                    rank: None if rank in stale else position
                    for rank, position in positions.items()}, -1)
        self.store.write_verdict(verdict)
        self._verdict = verdict
        self._act_on(verdict)

    def _verdict_on(self, round_number: int, positions: Dict[int, Optional[dict]],
                    changes: int) -> Verdict:
        diagnosis = diagnose(positions, self.timeout, self.blocking, self.lines)
        return Verdict(round_number, changes, diagnosis.stop, diagnosis.text,
                       checkpoint=sorted(rank for rank, p in positions.items()
                                         if p is not None and p['phase'] == Phase.CHECKPOINT))

    def _end_run(self, verdict: Verdict) -> None:
        self._ending = True
        end_run(self, verdict, self._log, self._exit_callbacks)

    def _log_once(self, text: str, is_error: bool, key: Optional[str] = None) -> None:
        if (key or text) not in self._logged:
            self._log(text, is_error)
            self._logged.add(key or text)

    # -- a rank that raised ---------------------------------------------------------------

    def report_exception(self, error: BaseException) -> None:
        """From the training thread, before ``error`` goes on up: publishes it so that the
        other ranks name it when their watchdogs fire; waits at most :data:`REPORT_WAIT`."""
        if self.stopped:
            return  # no rank reads its keys: the newest wrapper's watchdog watches
        if self._ending:
            # The other ranks' exits broke this rank's collective; the watchdog is about
            # to end this process with the diagnosis: no second story on top of it.
            time.sleep(2 * self.answer_wait + CHECKPOINT_WAIT)
            return
        self.position.raised(error)
        snapshot = self.position.snapshot()
        reporter = threading.Thread(target=self._store_operation,
                                    args=(lambda: self._publish(snapshot), ), daemon=True)
        reporter.start()
        reporter.join(REPORT_WAIT)

    # -- the store --------------------------------------------------------------------------

    def _publish(self, snapshot: dict) -> None:
        self._published_progress = self.position.progress()
        self.store.publish(snapshot)
        self._published_reading = _reading(snapshot)

    def _withdraw(self) -> None:
        self.store.withdraw()
        self._published_progress = self._published_reading = None
        self._verdict, self._claimed = None, None
        self._logged.clear()


def _reading(snapshot: dict) -> str:
    """What must not change between two readings of a stalled rank (its stack included:
    a thread that computes inside torch.distributed code shows a different line)."""
    return json.dumps([snapshot['moves'], snapshot['phase'], snapshot['error'],
                       snapshot['call'], snapshot['groups']])


def _watch(watchdog_ref, tick: float) -> None:
    while True:
        time.sleep(tick)
        watchdog = watchdog_ref()
        if watchdog is None or watchdog.stopped:
            return
        try:
            watchdog.look()
        except Exception as error:  # noqa: B902 - the guard must outlive its own faults
            watchdog._log(own_fault(error), True)
        del watchdog
