"""Step time and peak memory of GuardedDDP('auto') against plain DDP, in one run.

Run under torchrun (2 gloo ranks on the CPU by default):

    .venv/bin/python -m torch.distributed.run --nproc_per_node 2 benchmarks/bench_step_time.py

Every wrapper trains its own copy of the same model (same seed) with the real
``train_step`` and an SGD ``OptimWrapper``; the wrappers take turns (interleaved
repetitions), and each figure is the median over repetitions of the mean step time of a
block of steps. Ratios are printed against the baseline of each comparison:

- a model without unused parameters: GuardedDDP('auto') over DDP find_unused_parameters=False
- a model whose last task head is skipped on alternating iterations, differently per rank:
  GuardedDDP('auto') over DDP find_unused_parameters=True (plain DDP cannot train it)

Peak memory: CUDA's max_memory_allocated per block; on the CPU the process's peak RSS
(VmHWM, reset before each block through /proc/self/clear_refs).
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper

from mmdet3d_ddp_guard import GuardedDDP
from mmdet3d_ddp_guard.examples.bev_net import BEVConvNet, make_bev_batch

COMPARISONS = {
    'no_unused': dict(skip_task='never',
                      wrappers=['ddp_find_unused_false', 'guarded_auto', 'ddp_find_unused_true']),
    'changing_unused': dict(skip_task='rank',
                            wrappers=['ddp_find_unused_true', 'guarded_auto']),
}


def build(wrapper: str, skip_task: str, args, device):
    torch.manual_seed(0)
    model = BEVConvNet(args.in_channels, args.width, args.layers_per_stage,
                       skip_task=skip_task).to(device)
    device_ids = [device.index] if device.type == 'cuda' else None
    if wrapper == 'guarded_auto':
        ddp = GuardedDDP(model, device_ids=device_ids)
    else:
        ddp = MMDistributedDataParallel(
            model, device_ids=device_ids,
            find_unused_parameters=wrapper == 'ddp_find_unused_true')
    optim = OptimWrapper(torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9))
    return ddp, optim


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
    parser.add_argument('--amp', action='store_true', help='bf16 autocast (CUDA only)')
    parser.add_argument('--out', default=None, help='write the figures as JSON here')
    args = parser.parse_args()

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
    batch = make_bev_batch(args.batch_size, args.in_channels, args.size, device, seed=rank)
    results = {}
    for name, comparison in COMPARISONS.items():
        runs = {w: build(w, comparison['skip_task'], args, device)
                for w in comparison['wrappers']}
        times = {w: [] for w in runs}
        peaks = {w: [] for w in runs}
        with torch.autocast('cuda', torch.bfloat16, enabled=args.amp):
            for wrapper, (ddp, optim) in runs.items():
                time_block(ddp, optim, batch, args.warmup, device)
            for _ in range(args.repetitions):
                for wrapper, (ddp, optim) in runs.items():
                    reset_peak(device)
                    times[wrapper].append(time_block(ddp, optim, batch, args.steps, device))
                    peaks[wrapper].append(peak_mib(device))
        base = comparison['wrappers'][0]
        results[name] = {
            w: dict(step_ms=1000 * statistics.median(times[w]),
                    peak_mib=statistics.median(peaks[w]))
            for w in runs
        }
        for w in runs:
            results[name][w]['time_ratio'] = (results[name][w]['step_ms']
                                              / results[name][base]['step_ms'])
            results[name][w]['memory_ratio'] = (results[name][w]['peak_mib']
                                                / results[name][base]['peak_mib'])
        del runs
    if rank == 0:
        world = dist.get_world_size()
        print(f'\n{world} ranks, {dist.get_backend()}, {device.type}'
              + (f' ({torch.cuda.get_device_name(device)})' if device.type == 'cuda' else '')
              + f', torch {torch.__version__}; median of {args.repetitions} interleaved '
              f'repetitions of {args.steps} steps; BEVConvNet '
              f'{sum(1 for _ in BEVConvNet(args.in_channels, args.width, args.layers_per_stage).parameters())} '
              f'parameter tensors, batch {args.batch_size}x{args.in_channels}x{args.size}'
              f'x{args.size}' + (', bf16 autocast' if args.amp else ''))
        print(f'{"model":<16} {"wrapper":<24} {"step ms":>9} {"vs base":>8} '
              f'{"peak MiB":>9} {"vs base":>8}')
        for name, rows in results.items():
            for wrapper, row in rows.items():
                print(f'{name:<16} {wrapper:<24} {row["step_ms"]:9.2f} '
                      f'{row["time_ratio"]:8.3f} {row["peak_mib"]:9.1f} '
                      f'{row["memory_ratio"]:8.3f}')
        if args.out:
            with open(args.out, 'w') as f:
                json.dump(dict(args=vars(args), results=results), f, indent=2)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
