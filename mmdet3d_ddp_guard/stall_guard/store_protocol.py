"""How stalled ranks share their snapshots and agree on one verdict through the c10d store.

This module owns the keys under ``mmdet3d_ddp_guard/stall/<n>/`` of the store the run
already has (the n-th guarded wrapper of every rank shares them) and the operations on
them; what a snapshot says is :class:`~.rank_position.RankPosition`'s, the judgement
:func:`~.stall_diagnosis.diagnose`'s, and when to look :class:`~.stall_watchdog.StallWatchdog`'s.

The keys:

- ``position/<rank>``: a stalled rank's snapshot (JSON), ``{"moving": true}`` once it moves;
- ``beat/<rank>``: counts the rank's withdrawals, the first operation of each: a snapshot
  carries the count its rank had when it published it, and one whose rank has counted a
  withdrawal since is stale, never evidence, even when the withdrawal's other operations
  failed (a store that takes some operations and not others);
- ``changes``: counts every publication and withdrawal, so that whether anything changed
  since a verdict costs one operation;
- ``judge/<round>``: claimed with ``add``; the one rank that reads 1 judges the round;
- ``verdict``: the last round's :class:`Verdict`, polled by every stalled rank each tick;
- ``ended``: counts the ranks that read a stop verdict and leave.

Per stall round, with W ranks stalled: each rank publishes (2 operations), reads the change
counter and claims the round (2); the one judge reads the W snapshots (W operations, plus a
re-read of each rank that has not answered yet, at doubling intervals) and writes the
verdict (2); before a stop verdict it also reads every rank's beat (W), and the snapshots
again (W) where the change counter moved meanwhile. That is 4W operations (5W to 6W for the
round that stops the run) and W snapshots' bytes read by one rank,
not W by every rank; while the stall lasts each rank reads the verdict once a tick (one
operation). A rank that moves withdraws its snapshot (3 operations).
``compare_set`` with a value no key holds reads a key that may not exist yet without
waiting for it, on every torch from 1.9 (``Store.check`` is 1.10 and up, and a timed-out
``get`` leaves torch 1.9's TCPStore client broken).
"""
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

#: Under this prefix of the default store; then the wrapper's number.
KEY_PREFIX = 'mmdet3d_ddp_guard/stall/'
# What compare_set returns for a key that does not exist; no key is ever set to it.
_ABSENT = '\x00absent'
_MOVING = json.dumps(dict(moving=True))


@dataclass
class Verdict:
    """One round's judgement, the same for every rank.

    ``changes``: the change counter the judge read with the snapshots (a later judgement is
    due only once it grew); ``checkpoint``: the ranks that were writing a checkpoint, which
    the others wait for before they leave.
    """
    round: int
    changes: int
    stop: bool
    text: str
    checkpoint: List[int] = field(default_factory=list)


class StallStore:
    """One rank's side of the protocol (see the module's docstring).

    Args:
        store: The run's c10d store, under this wrapper's key prefix.
        rank (int): This rank in the watched group.
        global_ranks (list[int]): The group's ranks in the default group, which name the
            keys (every group's members share the default store).
    """

    def __init__(self, store, rank: int, global_ranks: List[int]):
        self.rank = rank
        self.world_size = len(global_ranks)
        self._store = store
        self._global_ranks = global_ranks
        #: Operations and bytes read so far (the budget tests and the benchmark read them),
        #: and of those operations the reads of the verdict (one a tick while stalled).
        self.operations = 0
        self.bytes_read = 0
        self.verdict_reads = 0
        # This rank's withdrawals as the store counted them: the date of its next snapshot.
        self._beats = 0

    def publish(self, snapshot: dict) -> None:
        dated = dict(snapshot, beat=self._beats)
        self._set(self._position_key(self.rank), json.dumps(dated, separators=(',', ':')))
        self._add('changes', 1)

    def withdraw(self) -> None:
        # The beat first: should the store take it and then fail the rest, the snapshot
        # left behind is already out of date.
        self._beats = self._add(self._beat_key(self.rank), 1)
        self._set(self._position_key(self.rank), _MOVING)
        self._add('changes', 1)

    def stale(self, positions: Dict[int, Optional[dict]]) -> List[int]:
        """The ranks whose snapshot in ``positions`` is older than their last withdrawal:
        they moved since, and only a store fault kept the snapshot readable."""
        return [rank for rank, position in sorted(positions.items())
                if position is not None and rank != self.rank
                and self._add(self._beat_key(rank), 0) > position['beat']]

    def changed(self, positions: Dict[int, Optional[dict]]) -> bool:
        """Whether another rank's snapshot in the store is no longer its one in
        ``positions``."""
        return any(self.position(rank) != position
                   for rank, position in positions.items() if rank != self.rank)

    def changes(self) -> int:
        return self._add('changes', 0)

    def claim(self, round_number: int) -> bool:
        """Whether this rank is the first to claim ``round_number``: its judge."""
        return self._add(f'judge/{round_number}', 1) == 1

    def verdict(self) -> Optional[Verdict]:
        self.verdict_reads += 1
        raw = self._read('verdict')
        return None if raw is None else Verdict(**json.loads(raw))

    def write_verdict(self, verdict: Verdict) -> None:
        self._set('verdict', json.dumps(asdict(verdict)))

    def position(self, rank: int) -> Optional[dict]:
        """``rank``'s published snapshot; None where it has none or moves."""
        raw = self._read(self._position_key(rank))
        answer = None if raw is None else json.loads(raw)
        return None if answer is None or answer.get('moving') else answer

    def positions(self, own: dict, deadline: float, tick: float) -> Dict[int, Optional[dict]]:
        """Every rank's snapshot (this rank's is ``own``), None for ranks that have not
        answered by ``deadline``; those are read again at doubling intervals, so that a
        rank that never answers costs a few reads, not one a tick."""
        positions: Dict[int, Optional[dict]] = {self.rank: own}
        interval = tick
        while True:
            for rank in range(self.world_size):
                if positions.get(rank) is None:
                    positions[rank] = self.position(rank)
            if all(p is not None for p in positions.values()) or time.monotonic() > deadline:
                return positions
            time.sleep(interval)
            interval *= 2

    def count_out(self) -> int:
        """Counts this rank among those that leave; returns how many have."""
        return self._add('ended', 1)

    def counted_out(self) -> int:
        return self._add('ended', 0)

    def _position_key(self, rank: int) -> str:
        return f'position/{self._global_ranks[rank]}'

    def _beat_key(self, rank: int) -> str:
        return f'beat/{self._global_ranks[rank]}'

    def _add(self, key: str, amount: int) -> int:
        self.operations += 1
        return self._store.add(key, amount)

    def _set(self, key: str, value: str) -> None:
        self.operations += 1
        self._store.set(key, value)

    def _read(self, key: str) -> Optional[bytes]:
        self.operations += 1
        raw = self._store.compare_set(key, _ABSENT, _ABSENT)
        self.bytes_read += len(raw)
        return None if raw == _ABSENT.encode() else raw
