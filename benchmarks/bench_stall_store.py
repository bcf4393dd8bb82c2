"""What one stall costs the run's store, at 8 to 1024 ranks.

W simulated ranks, each a thread of this process with the package's own watchdog
(:class:`StallWatchdog` on its own :class:`RankPosition`, its own TCPStore client, its own
``StallStore``), against one real TCPStore served here, as the ranks of a job share their
launcher's. Every rank stops moving at once; two stalls per world size:

- ``slow rank``: rank 0 busy outside collectives (a validation), the others waiting in
  DDP's gradient all-reduce: a verdict that lets the run go on;
- ``hang``: rank 0's last collective differs from the others' (a gradient bucket of another
  size): a stop verdict (the exit is replaced by a note of its time; nothing else is).

It prints, per stall: store operations of all ranks together per rank (``ops/rank``) up to
the moment every rank has acted on the verdict, split into the reads of the verdict (one a
tick per rank while the stall lasts) and the others (publishing, claiming, judging, counting
out), and the judge's alone; snapshot bytes read by the judge and the most any other rank
read; and the seconds from the stall timeout to the moment every rank has logged (or ended
on) the verdict.

    .venv/bin/python benchmarks/bench_stall_store.py --world-sizes 8 64 256 1024
"""
import argparse
import datetime
import gc
import itertools
import time

import torch.distributed as dist
import torch.nn as nn

from mmdet3d_ddp_guard.environment.framework_table import MMENGINE_LINES
from mmdet3d_ddp_guard.stall_guard.rank_position import RankPosition
from mmdet3d_ddp_guard.stall_guard.stall_watchdog import StallWatchdog
from mmdet3d_ddp_guard.stall_guard.store_protocol import KEY_PREFIX, StallStore

_RUNS = itertools.count()


class MeasuredWatchdog(StallWatchdog):
    """The package's watchdog, with the time of its first verdict noted and no exit."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.acted_at = None
        self.judged = False

    def _judge(self, round_number, snapshot):
        self.judged = True
        super()._judge(round_number, snapshot)

    def _log_once(self, text, is_error, key=None):
        if 'stall guard: no rank has moved' in text and self.acted_at is None:
            self.acted_at = time.monotonic()
        super()._log_once(text, is_error, key)

    def _end_run(self, verdict):
        if self.acted_at is None:
            self.acted_at = time.monotonic()
        self._stopped = True  # the thread ends here, as the process would


class Detector(nn.Module):
    """Submodules to name; the record's entries are what the benchmark varies."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(*[nn.Linear(4, 4) for _ in range(8)])
        self.head = nn.Linear(4, 1)


def stall(world_size: int, case: str, timeout: float, host: str, port: int) -> dict:
    prefix = f'{KEY_PREFIX}bench-{next(_RUNS)}/'
    model = Detector()
    watchdogs = []
    for rank in range(world_size):
        client = dist.TCPStore(host, port, world_size + 1, False,
                               datetime.timedelta(seconds=60))
        position = RankPosition(model)
        store = StallStore(dist.PrefixStore(prefix, client), rank, list(range(world_size)))
        watchdog = MeasuredWatchdog(position, timeout, lambda text, error: None, store,
                                    blocking=True, lines=MMENGINE_LINES)
        # As start_forward, without marking this position as the one the thread steps for.
        position.iteration = 0
        position.collectives.start_iteration(0)
        for bucket in range(6):  # a detector's gradient buckets, then where each rank is
            numel = 1000 + bucket if case == 'slow rank' or rank > 0 or bucket < 5 else 7
            position.collectives.record_bucket(None, bucket, numel)
        position.enter('validation' if case == 'slow rank' and rank == 0 else 'backward')
        watchdog._last_progress = position.progress()
        watchdogs.append(watchdog)
    started = time.monotonic()
    for watchdog in watchdogs:
        watchdog._still_since = started
        watchdog.start()
    deadline = started + timeout + 120
    while time.monotonic() < deadline and any(w.acted_at is None for w in watchdogs):
        time.sleep(0.05)
    operations = sum(w.store.operations for w in watchdogs)
    polls = sum(w.store.verdict_reads for w in watchdogs)
    judges = [w for w in watchdogs if w.judged]
    others = [w.store.bytes_read for w in watchdogs if not w.judged]
    acted = [w.acted_at for w in watchdogs if w.acted_at is not None]
    for watchdog in watchdogs:
        watchdog._stopped = True
    return dict(world_size=world_size, case=case, ops_per_rank=operations / world_size,
                polls_per_rank=polls / world_size,
                other_ops=(operations - polls) / world_size,
                judges=len(judges), judge_ops=sum(w.store.operations for w in judges),
                judge_bytes=sum(w.store.bytes_read for w in judges),
                other_bytes=max(others) if others else 0,
                acted=len(acted),
                seconds=(max(acted) - started - timeout) if acted else float('nan'))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--world-sizes', type=int, nargs='+', default=[8, 64, 256, 1024])
    parser.add_argument('--timeout', type=float, default=5.0,
                        help='stall timeout T in seconds (the tick is T/10, at most 1 s)')
    args = parser.parse_args()
    server = dist.TCPStore('127.0.0.1', 0, 1, True, datetime.timedelta(seconds=60))
    print(f'stall timeout {args.timeout:g} s; one TCPStore; W watchdog threads')
    print(f"{'W':>5} {'stall':>9} {'ops/rank':>8} {'reads of the verdict':>20} "
          f"{'other ops':>9} {'judges':>6} {'judge ops':>9} "
          f"{'judge KB':>8} {'other KB':>8} {'acted':>6} {'T to all (s)':>12}")
    for world_size in args.world_sizes:
        for case in ('slow rank', 'hang'):
            row = stall(world_size, case, args.timeout, '127.0.0.1', server.port)
            print(f"{row['world_size']:>5} {row['case']:>9} {row['ops_per_rank']:>8.2f} "
                  f"{row['polls_per_rank']:>20.2f} {row['other_ops']:>9.2f} "
                  f"{row['judges']:>6} {row['judge_ops']:>9} {row['judge_bytes'] / 1e3:>8.1f} "
                  f"{row['other_bytes'] / 1e3:>8.2f} {row['acted']:>6} "
                  f"{row['seconds']:>12.2f}", flush=True)
            time.sleep(2 * min(1.0, args.timeout / 10))  # the threads see their stop
            gc.collect()


if __name__ == '__main__':
    main()
