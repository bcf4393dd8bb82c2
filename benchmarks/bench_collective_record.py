"""What the stall guard's collective record adds to one Python-level collective.

One gloo rank (a world of 1, so the collective itself is as cheap as it gets and the record's
share is as large as it gets): ``dist.all_reduce`` of one element, issued from a submodule's
forward 20 frames below the model, as a SyncBN does; the record active (what a guarded run
with the stall guard on does) against torch's own function. Interleaved repetitions,
medians.

    .venv/bin/python benchmarks/bench_collective_record.py --repetitions 9 --calls 20000
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from mmdet3d_ddp_guard.stall_guard.process_stall_guard import PROCESS_STALL_GUARD
from mmdet3d_ddp_guard.stall_guard.collective_log import CollectiveLog


class Leaf(nn.Module):
    def forward(self, x, calls):
        for _ in range(calls):
            dist.all_reduce(x)
        return x


class Nest(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.inner = Leaf() if depth == 0 else Nest(depth - 1)

    def forward(self, x, calls):
        return self.inner(x, calls)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repetitions', type=int, default=9)
    parser.add_argument('--calls', type=int, default=20000)
    args = parser.parse_args()
    os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
    os.environ.setdefault('MASTER_PORT', '29533')
    dist.init_process_group('gloo', rank=0, world_size=1)
    model = Nest(10)
    x = torch.ones(1)
    log = CollectiveLog(model)
    PROCESS_STALL_GUARD.recording.record_collectives()
    times = {'torch': [], 'recorded': []}
    for _ in range(args.repetitions):
        for name in times:
            PROCESS_STALL_GUARD.recording.activate(log if name == 'recorded' else None)
            start = time.perf_counter()
            model(x, args.calls)
            times[name].append((time.perf_counter() - start) / args.calls * 1e6)
    PROCESS_STALL_GUARD.recording.activate(None)
    plain, recorded = (statistics.median(times[name]) for name in ('torch', 'recorded'))
    print(f'torch {torch.__version__}, gloo, world 1; median of {args.repetitions} '
          f'interleaved repetitions of {args.calls} all_reduce calls')
    print(f'torch.distributed.all_reduce: {plain:.2f} us per call; recorded: {recorded:.2f} us '
          f'({recorded - plain:+.2f} us, {recorded / plain:.3f} times)')
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
