"""The files of :class:`UnusedParamsHook`, written and read so that no fault costs the run.

In ``out_dir``, named after ``prefix`` (``unused_params`` by default):

- ``<prefix>_table.json``: id -> name, shape, numel, module type; written once at start.
- ``<prefix>.jsonl``: one line per iteration,
  ``{"iter": 12, "epoch": 0, "unused_per_rank": [[ids of rank 0], [ids of rank 1], ...],
  "ranks_left_unreached": 1}``; the last field (how many ranks left parameters unreached,
  which is what makes plain DDP fail; the rest were undefined gradients) only where it is
  not 0.

What survives a crash: each line is appended with one ``write`` of the complete line on an
unbuffered file, so every line whose ``write`` returned is in the operating system's hands
and survives the process being killed (a power loss may still take the OS's unsynced tail).
A kill, a preempted node or a full disk in the middle of a ``write`` leaves at most one torn
line, at the end. The reader drops a torn or garbled tail with one warning that says how many
lines and why, skips a garbled line in the middle with a warning naming its line number, and
keeps the last line of an iteration written twice (a resume from an older checkpoint).

Writing never stops training: an ``OSError`` while appending (disk full, out_dir gone,
permissions changed mid-run) is logged once with the path and the reason; the lines wait in
memory (up to :data:`MAX_PENDING_BYTES`) and are written, in order, by the next append that
succeeds. Only the start (:meth:`HistoryFile.start`) raises: an out_dir that cannot be
written from the first moment is a configuration mistake, not a fault.
"""
import json
import logging
import os
import os.path as osp
from collections import deque
from typing import Dict, Iterable, List, Optional, Tuple

from ..guard.iteration_usage import IterationUsage, UsageStatistics

#: The most bytes of lines kept in memory while the file cannot be written.
MAX_PENDING_BYTES = 64 * 2**20


def table_path(out_dir: str, prefix: str) -> str:
    return osp.join(out_dir, f'{prefix}_table.json')


def history_path(out_dir: str, prefix: str) -> str:
    return osp.join(out_dir, f'{prefix}.jsonl')


def write_table(path: str, rows: List[Dict]) -> None:
    """Writes the id -> parameter table (``ParamTable.describe`` of every id)."""
    with open(path, 'w') as f:
        json.dump(rows, f)


class RecordedTable:
    """The parameter table as ``<prefix>_table.json`` holds it: what the summary needs of a
    :class:`ParamTable` (``names``, ``describe``, ``len``) when no model is at hand.

    Args:
        rows (list[dict]): One dict per id, as ``ParamTable.describe`` gives.
    """

    def __init__(self, rows: List[Dict]):
        self.rows = rows
        self.names = [row['name'] for row in rows]

    def __len__(self) -> int:
        return len(self.rows)

    def describe(self, index: int) -> Dict:
        return dict(self.rows[index])

    @classmethod
    def load(cls, path: str) -> 'RecordedTable':
        """Raises ``ValueError`` naming the file when it is not a table this package wrote."""
        try:
            with open(path) as f:
                rows = json.load(f)
            if not (isinstance(rows, list)
                    and all(isinstance(row, dict) and {'id', 'name', 'shape', 'numel',
                                                       'module_type'} <= set(row)
                            for row in rows)):
                raise ValueError('not a list of parameter rows')
        except (OSError, ValueError) as error:
            raise ValueError(f'cannot read the parameter table {path}: {error}') from error
        return cls(rows)


def parse_line(text: str, num_params: Optional[int] = None) -> Dict:
    """One line of the per-iteration file; ``ValueError`` saying what is wrong with it."""
    line = json.loads(text)
    if not isinstance(line, dict) or not isinstance(line.get('iter'), int):
        raise ValueError('no integer "iter"')
    per_rank = line.get('unused_per_rank')
    if not (isinstance(per_rank, list) and per_rank
            and all(isinstance(ids, list) and all(isinstance(i, int) for i in ids)
                    for ids in per_rank)):
        raise ValueError('"unused_per_rank" is not a list of lists of ids')
    if num_params is not None and any(not 0 <= i < num_params for ids in per_rank
                                      for i in ids):
        raise ValueError(f'an id outside the table of {num_params} parameters')
    unreached = line.get('ranks_left_unreached', 0)
    if isinstance(unreached, bool) or not isinstance(unreached, int) \
            or not 0 <= unreached <= len(per_rank):
        raise ValueError('"ranks_left_unreached" is not a number of ranks')
    return line


def read_history(path: str, logger: logging.Logger,
                 num_params: Optional[int] = None) -> List[Dict]:
    """The lines of the per-iteration file, tolerant of what a crash leaves (see the module
    docstring); each problem is one warning on ``logger``. A missing file is empty; a file
    that cannot be read raises ``OSError``."""
    if not osp.exists(path):
        return []
    with open(path, 'rb') as f:
        raw = f.read().split(b'\n')
    if raw and raw[-1] == b'':
        raw.pop()  # the newline that ends the last complete line
    parsed: List[Tuple[int, Optional[Dict], str]] = []
    for number, data in enumerate(raw, start=1):
        if not data.strip():
            continue
        try:
            parsed.append((number, parse_line(data.decode('utf-8'), num_params), ''))
        except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            parsed.append((number, None, str(error)))
    tail = 0
    while tail < len(parsed) and parsed[-1 - tail][1] is None:
        tail += 1
    if tail:
        first = parsed[-tail][0]
        logger.warning(
            f'UnusedParamsHook: dropped {tail} torn or garbled line(s) at the end of {path} '
            f'(from line {first}: {parsed[-tail][2]}): what a write interrupted by a crash, a '
            'preempted node or a full disk leaves.')
        parsed = parsed[:-tail]
    for number, line, reason in parsed:
        if line is None:
            logger.warning(f'UnusedParamsHook: skipped garbled line {number} of {path} '
                           f'({reason}); that iteration is missing from the file.')
    return latest_per_iteration((line for _, line, _ in parsed if line is not None), path,
                                logger)


def latest_per_iteration(lines: Iterable[Dict], path: str,
                         logger: logging.Logger) -> List[Dict]:
    """One line per iteration, in iteration order; of an iteration written twice (lines past
    a checkpoint that a resume could not remove) the later line wins."""
    by_iter: Dict[int, Dict] = {}
    repeated = set()
    for line in lines:
        if line['iter'] in by_iter:
            repeated.add(line['iter'])
        by_iter[line['iter']] = line
    if repeated:
        logger.warning(f'UnusedParamsHook: {path} holds {len(repeated)} iteration(s) more than '
                       f'once (first: {min(repeated)}); kept the last line of each.')
    return [by_iter[i] for i in sorted(by_iter)]


def replay_statistics(num_params: int, lines: List[Dict]) -> UsageStatistics:
    """The statistics the hook accumulated, rebuilt from its per-iteration lines."""
    statistics = UsageStatistics(num_params)
    for line in lines:
        per_rank = tuple(tuple(ids) for ids in line['unused_per_rank'])
        statistics.update(IterationUsage(line['iter'], 0, per_rank[0], per_rank,
                                         line.get('ranks_left_unreached', 0)))
    return statistics


def missing_iterations(lines: List[Dict]) -> List[Tuple[int, int]]:
    """Ranges ``(first, last)`` of iterations between 0 and the last line that have no line."""
    gaps, expected = [], 0
    for line in lines:
        if line['iter'] > expected:
            gaps.append((expected, line['iter'] - 1))
        expected = line['iter'] + 1
    return gaps


class HistoryFile:
    """Rank 0's per-iteration file: whole-line appends, and faults that never stop training.

    Args:
        path (str): The ``.jsonl`` file.
        logger (logging.Logger): Where faults and recoveries are reported.
    """

    def __init__(self, path: str, logger: logging.Logger):
        self.path = path
        self.logger = logger
        self._pending: deque = deque()
        self._pending_bytes = 0
        self._dropped: List[int] = []  # iterations lost past MAX_PENDING_BYTES
        self._failing = False
        # A file left by an earlier run may end in a torn line: start our first line on a
        # fresh one.
        self._check_tail = True

    def start(self, fresh: bool) -> None:
        """A fresh run empties the file; raises ``OSError`` (a configuration mistake)."""
        if fresh:
            open(self.path, 'w').close()

    def append(self, line: Dict) -> bool:
        """Queues ``line`` and writes every queued line; returns whether the file is current."""
        data = (json.dumps(line) + '\n').encode()
        self._pending.append((line['iter'], data))
        self._pending_bytes += len(data)
        while self._pending_bytes > MAX_PENDING_BYTES and len(self._pending) > 1:
            iteration, dropped = self._pending.popleft()
            self._pending_bytes -= len(dropped)
            self._dropped.append(iteration)
        return self.flush()

    def flush(self) -> bool:
        """Writes the queued lines in one ``write``; returns whether nothing is left queued."""
        if not self._pending:
            return True
        data = b''.join(data for _, data in self._pending)
        try:
            self._write(data)
        except OSError as error:
            if not self._failing:
                self.logger.warning(
                    f'UnusedParamsHook: cannot append to {self.path} ({error.strerror or error})'
                    '; training goes on, the statistics stay in memory and in checkpoints, and '
                    'the lines wait in memory until a later iteration can write them. This is '
                    'reported once.')
                self._failing = True
            return False
        if self._failing:
            self.logger.info(f'UnusedParamsHook: {self.path} is writable again; wrote the '
                             f'lines of iterations {self._pending[0][0]}-{self._pending[-1][0]}.')
            self._failing = False
        if self._dropped:
            self.logger.warning(
                f'UnusedParamsHook: {len(self._dropped)} iteration(s) '
                f'({self._dropped[0]}-{self._dropped[-1]}) are missing from {self.path}: the '
                f'outage outlasted the {MAX_PENDING_BYTES // 2**20} MiB kept in memory. The '
                'statistics and the summary still count them.')
            self._dropped = []
        self._pending.clear()
        self._pending_bytes = 0
        return True

    def _write(self, data: bytes) -> None:
        with open(self.path, 'a+b', buffering=0) as f:
            start = f.seek(0, os.SEEK_END)
            if self._check_tail and start:
                f.seek(start - 1)
                if f.read(1) != b'\n':
                    data = b'\n' + data  # the torn line stays garbled and alone
            try:
                written = f.write(data)
                if written != len(data):
                    raise OSError(f'wrote {written} of {len(data)} bytes (disk full?)')
            except OSError:
                # Cut the partial line off again, so the retry appends whole lines.
                try:
                    f.truncate(start)
                except OSError:
                    self._check_tail = True
                raise
            self._check_tail = False

    @property
    def pending_iterations(self) -> List[int]:
        return [iteration for iteration, _ in self._pending]

    def keep_before(self, iteration: int) -> None:
        """After a resume from the checkpoint of ``iteration``: drops the lines of later
        iterations (written between the checkpoint and the crash), so the file holds every
        iteration once. Rewrites through a temporary file; a failure is logged, not raised."""
        temporary = f'{self.path}.tmp'
        try:
            kept = [line for line in read_history(self.path, self.logger)
                    if line['iter'] < iteration]
            with open(temporary, 'w') as f:
                f.writelines(json.dumps(line) + '\n' for line in kept)
            os.replace(temporary, self.path)
        except OSError as error:
            self.logger.warning(
                f'UnusedParamsHook: cannot rewrite {self.path} after the resume '
                f'({error.strerror or error}); lines past iteration {iteration} stay in it, '
                'and readers keep the last line of each iteration.')
        self._check_tail = False

    def set_aside(self, suffix: str) -> Optional[str]:
        """Renames the file to ``<path>.<suffix>`` (its ids belong to another table); returns
        the new name, or None when there was no file or it could not be renamed."""
        if not osp.exists(self.path):
            return None
        target = f'{self.path}.{suffix}'
        try:
            os.replace(self.path, target)
        except OSError as error:
            self.logger.warning(f'UnusedParamsHook: cannot rename {self.path} to {target} '
                                f'({error.strerror or error}).')
            return None
        return target
