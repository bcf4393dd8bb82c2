"""Step time and peak memory of GuardedDDP('auto') against plain DDP, in one run.

Run under torchrun (2 gloo ranks on the CPU by default):

    .venv/bin/python -m torch.distributed.run --nproc_per_node 2 benchmarks/bench_step_time.py

Every wrapper trains its own copy of the same model (same seed) with the real
``train_step`` and an SGD ``OptimWrapper``; the wrappers take turns (interleaved
repetitions), and each figure is the median over repetitions of the mean step time of a
block of steps. Every row is printed against both baselines: plain DDP
(``find_unused_parameters=False``, which only the models without unused parameters can
train) and DDP's graph search (``find_unused_parameters=True``). The models:

- BEVConvNet, a conv net shaped like CenterPoint's (228 parameter tensors): without unused
  parameters, and with its last task head skipped on alternating iterations, differently
  per rank;
- a parameter-count sweep (``--chain-depths``): ToyDetector with a chain of Linear blocks
  (2 tensors each; small layers, so that per-parameter overhead shows), without unused
  parameters (pattern 'none') and with a branch whose use differs between ranks in every
  iteration plus a dead layer (pattern 'rank_dependent').

``--comm-hook allreduce`` or ``fp16_compress`` registers torch's hook of that name on every
wrapper (a user's comm hook: under the guard it reduces the buckets, and the counts travel
in an all-reduce of their own on the last bucket, one small collective per iteration).

GuardedDDP runs with its stall guard on (``guarded_auto``, the default: a watchdog thread
that wakes once a second) and, on the models without unused parameters, off
(``guarded_auto_stall_off``, ``stall_timeout=None``).

Peak memory: CUDA's max_memory_allocated per block; on the CPU the process's peak RSS
(VmHWM, reset before each block through /proc/self/clear_refs).

Rank 0 prints each model's rows, and rewrites ``--out``, as soon as that model is measured,
so that a run stopped by a time limit (the device check's) keeps what it measured.
``--profile-steps N`` then profiles N steps of every wrapper (torch.profiler, operators by
self CPU time, appended to ``--profile-out``): where the time of a slower wrapper goes.
"""
import argparse
import json
import os
import statistics
import time

import repo_root  # noqa: F401,I100 (tests/ and demo/ importable: not installed)
import torch
import torch.distributed as dist
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper

from mmdet3d_ddp_guard import GuardedDDP
from mmdet3d_ddp_guard.environment.cpu_ddp import leave_gloo_cleanly
from tests.toys import ToyDetector, make_toy_batch
from tests.toys.bev_net import BEVConvNet, make_bev_batch

PLAIN, SEARCH, GUARDED = 'ddp_find_unused_false', 'ddp_find_unused_true', 'guarded_auto'
#: GuardedDDP('auto') with its stall guard off: the stall guard's own cost is the difference.
GUARDED_NO_STALL_GUARD = 'guarded_auto_stall_off'


def comparisons(args):
    """name -> (model factory, wrappers); plain DDP only where it can train the model."""
    bev = dict(in_channels=args.in_channels, width=args.width,
               layers_per_stage=args.layers_per_stage)
    found = {
        'bev_no_unused': (lambda: BEVConvNet(skip_task='never', **bev),
                          [PLAIN, GUARDED, GUARDED_NO_STALL_GUARD, SEARCH]),
        'bev_rank_divergent': (lambda: BEVConvNet(skip_task='rank', **bev), [SEARCH, GUARDED]),
    }
    for depth in args.chain_depths:
        found[f'chain{depth}_no_unused'] = (
            lambda depth=depth: ToyDetector('none', width=args.chain_width, depth=depth),
            [PLAIN, GUARDED, GUARDED_NO_STALL_GUARD, SEARCH])
        found[f'chain{depth}_rank_divergent'] = (
            lambda depth=depth: ToyDetector('rank_dependent', width=args.chain_width,
                                            depth=depth),
            [SEARCH, GUARDED])
    return found


def build(wrapper: str, make_model, device, comm_hook: str):
    torch.manual_seed(0)
    model = make_model().to(device)
    device_ids = [device.index] if device.type == 'cuda' else None
    if wrapper == GUARDED:
        ddp = GuardedDDP(model, device_ids=device_ids)  # the stall guard on, its default
    elif wrapper == GUARDED_NO_STALL_GUARD:
        ddp = GuardedDDP(model, device_ids=device_ids, stall_timeout=None)
    else:
        ddp = MMDistributedDataParallel(model, device_ids=device_ids,
                                        find_unused_parameters=wrapper == SEARCH)
    if comm_hook != 'none':
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, getattr(default_hooks, f'{comm_hook}_hook'))
    optim = OptimWrapper(torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9))
    return ddp, optim


def make_batch(name: str, args, device, rank: int):
    if name.startswith('bev'):
        return make_bev_batch(args.batch_size, args.in_channels, args.size, device, seed=rank)
    return {key: value.to(device)
            for key, value in make_toy_batch(0, rank, batch_size=args.batch_size).items()}


def reset_peak(device):
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    else:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')


def peak_mib(device) -> float:
    if device.type == 'cuda':
        return torch.cuda.max_memory_allocated(device) / 2**20
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) / 1024
    return float('nan')


def time_block(ddp, optim, batch, steps, device) -> float:
    dist.barrier()
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        ddp.train_step(batch, optim)
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    dist.barrier()
    return (time.perf_counter() - start) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    parser.add_argument('--backend', default=None, help='gloo (CPU default) or nccl')
    parser.add_argument('--repetitions', type=int, default=7)
    parser.add_argument('--steps', type=int, default=10, help='steps per timed block')
    parser.add_argument('--warmup', type=int, default=4)
    parser.add_argument('--batch-size', type=int, default=2)
    parser.add_argument('--in-channels', type=int, default=32)
    parser.add_argument('--width', type=int, default=16)
    parser.add_argument('--layers-per-stage', type=int, default=3)
    parser.add_argument('--size', type=int, default=64, help='BEV grid side')
    parser.add_argument('--chain-depths', type=int, nargs='*', default=[100, 500, 1500, 3000],
                        help='Linear blocks of the sweep models (2 tensors each); none: '
                        'BEVConvNet only')
    parser.add_argument('--chain-width', type=int, default=16)
    parser.add_argument('--amp', action='store_true', help='bf16 autocast (CUDA only)')
    parser.add_argument('--comm-hook', default='none',
                        choices=['none', 'allreduce', 'fp16_compress'],
                        help="torch's DDP comm hook of that name on every wrapper")
    parser.add_argument('--out', default=None, help='write the figures as JSON here')
    parser.add_argument('--profile-steps', type=int, default=0,
                        help='after the timing, profile this many steps of every wrapper '
                        '(torch.profiler; it slows them: the timing is done first)')
    parser.add_argument('--profile-out', default='step_profile.txt',
                        help='where rank 0 appends the profiles\' operator tables')
    args = parser.parse_args()
    if args.steps < 1 or args.repetitions < 1 or args.warmup < 0:
        parser.error('--steps and --repetitions must be at least 1, --warmup at least 0')

    dist.init_process_group(args.backend or ('nccl' if args.device == 'cuda' else 'gloo'))
    rank = dist.get_rank()
    device = torch.device('cpu')
    if args.device == 'cuda':
        # Several ranks may share one GPU (gloo): local rank r takes GPU r modulo the GPUs
        # there are, and says so in LOCAL_RANK, which MMEngine's logger uses as a GPU index.
        index = int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()
        os.environ['LOCAL_RANK'] = str(index)
        device = torch.device('cuda', index)
    if device.type == 'cuda':
        torch.cuda.set_device(device)
    if rank == 0:
        print(f'\n{dist.get_world_size()} ranks, {dist.get_backend()}, {device.type}'
              + (f' ({torch.cuda.get_device_name(device)})' if device.type == 'cuda' else '')
              + f', torch {torch.__version__}; median of {args.repetitions} interleaved '
              f'repetitions of {args.steps} steps; BEV batch {args.batch_size}x'
              f'{args.in_channels}x{args.size}x{args.size}, chain width {args.chain_width}'
              + (', bf16 autocast' if args.amp else '')
              + (f', comm hook {args.comm_hook}_hook' if args.comm_hook != 'none' else ''))
        print(f'{"model":<26} {"tensors":>7} {"wrapper":<22} {"step ms":>9} {"vs plain":>8} '
              f'{"vs search":>9} {"peak MiB":>9} {"mem vs":>7}', flush=True)
    results = {}
    for name, (make_model, wrappers) in comparisons(args).items():
        batch = make_batch(name, args, device, rank)
        runs = {w: build(w, make_model, device, args.comm_hook) for w in wrappers}
        # A world of one rank has nobody to wait for, hence no stall guard to measure.
        if dist.get_world_size() > 1 and runs[GUARDED][0].stall_watchdog is None:
            raise RuntimeError(f'{GUARDED} has no stall watchdog')
        times = {w: [] for w in runs}
        peaks = {w: [] for w in runs}
        with torch.autocast('cuda', torch.bfloat16, enabled=args.amp):
            for wrapper, (ddp, optim) in runs.items():
                if args.warmup:
                    time_block(ddp, optim, batch, args.warmup, device)
            for _ in range(args.repetitions):
                for wrapper, (ddp, optim) in runs.items():
                    reset_peak(device)
                    times[wrapper].append(time_block(ddp, optim, batch, args.steps, device))
                    peaks[wrapper].append(peak_mib(device))
            if args.profile_steps:
                profiles = {w: profile_steps(ddp, optim, batch, args.profile_steps, device)
                            for w, (ddp, optim) in runs.items()}
        tensors = sum(1 for p in runs[wrappers[0]][0].parameters() if p.requires_grad)
        rows = {w: dict(step_ms=1000 * statistics.median(times[w]),
                        peak_mib=statistics.median(peaks[w]), tensors=tensors) for w in runs}
        for w, row in rows.items():
            for base in (PLAIN, SEARCH):
                if base in rows:
                    row[f'time_vs_{base}'] = row['step_ms'] / rows[base]['step_ms']
                    row[f'memory_vs_{base}'] = row['peak_mib'] / rows[base]['peak_mib']
        results[name] = rows
        for ddp, _ in runs.values():  # the end of a run, as the Runner's stall hook ends it
            if getattr(ddp, 'stall_watchdog', None) is not None:
                ddp.stall_watchdog.stop()
        del runs
        if rank != 0:
            continue
        # Each model's rows as soon as it is measured: a run stopped by a time limit keeps them.
        print_rows(name, rows)
        if args.out:
            with open(args.out, 'w') as f:
                json.dump(dict(args=vars(args), results=results), f, indent=2)
        if args.profile_steps:
            with open(args.profile_out, 'a') as f:
                for wrapper, table in profiles.items():
                    f.write(f'\n== {name}, {wrapper}: {args.profile_steps} profiled steps, '
                            f'operators by self CPU time\n{table}\n')
    leave_gloo_cleanly()  # the wrappers outlive the group: see the function


def print_rows(name: str, rows: dict) -> None:
    for wrapper, row in rows.items():
        base = PLAIN if PLAIN in rows else SEARCH
        plain = row.get(f'time_vs_{PLAIN}')
        print(f'{name:<26} {row["tensors"]:7d} {wrapper:<22} {row["step_ms"]:9.2f} '
              f'{"-" if plain is None else f"{plain:.3f}":>8} '
              f'{row[f"time_vs_{SEARCH}"]:9.3f} {row["peak_mib"]:9.1f} '
              f'{row[f"memory_vs_{base}"]:7.3f}', flush=True)


def profile_steps(ddp, optim, batch, steps, device) -> str:
    """torch.profiler's operator table of ``steps`` steps: where a wrapper's time goes."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if device.type == 'cuda' else [])
    with profile(activities=activities) as profiler:
        time_block(ddp, optim, batch, steps, device)
    return profiler.key_averages().table(sort_by='self_cpu_time_total', row_limit=20)


if __name__ == '__main__':
    main()
