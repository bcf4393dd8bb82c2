"""What UnusedParamsHook adds to the step time of real Runner training, 2 ranks.

    .venv/bin/python -m torch.distributed.run --nproc_per_node 2 benchmarks/bench_hook_cost.py

For each wrapper (GuardedDDP, whose record the hook reads; and plain DDP with
find_unused_parameters=True, where the hook installs its own record and the ranks exchange
their masks once per LoggerHook line, every ``--log-interval`` iterations), Runners with and
without the hook take turns (interleaved repetitions) training BEVConvNet (228 parameter
tensors) on random BEV data. Step time is MMEngine's own per-iteration ``train/time``
(IterTimerHook); the first iterations of every run are dropped; the figure is the median over
repetitions of each run's median step time.
"""
import argparse
import statistics
import tempfile

import repo_root  # noqa: F401,I100 (tests/ and demo/ importable: not installed)
import torch.distributed as dist
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.runner import Runner

import mmdet3d_ddp_guard  # noqa: F401 (registers GuardedDDP, the hook, the CPU launch fix)
from mmdet3d_ddp_guard.environment.cpu_ddp import leave_gloo_cleanly
import tests.toys.bev_net  # noqa: F401 (registers BEVConvNet, its data)

WRAPPERS = {
    'GuardedDDP': dict(type='GuardedDDP'),
    'DDP find_unused=True': dict(type='CPUCompatibleMMDDP', find_unused_parameters=True),
}


#: The first iterations of a run, which build the Runner's caches and are not timed.
DROPPED_ITERATIONS = 3


def run(work_dir: str, name: str, wrapper: dict, hook: bool, iters: int,
        log_interval: int) -> float:
    cfg = Config(dict(
        model=dict(type='BEVConvNet', in_channels=32, width=16, skip_task='rank'),
        work_dir=work_dir, experiment_name=name,
        train_dataloader=dict(batch_size=2, num_workers=0,
                              sampler=dict(type='DefaultSampler', shuffle=False),
                              collate_fn=dict(type='default_collate'),
                              dataset=dict(type='BEVNoiseDataset', length=4 * iters)),
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=iters),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=1e-3, momentum=0.9)),
        model_wrapper_cfg=dict(wrapper),
        custom_hooks=[dict(type='UnusedParamsHook', interval=50, plot=False)] if hook else [],
        default_hooks=dict(logger=dict(type='LoggerHook', interval=log_interval),
                           checkpoint=dict(type='CheckpointHook', interval=10**6,
                                           by_epoch=False)),
        log_processor=dict(by_epoch=False, window_size=log_interval),
        log_level='WARNING', launcher='pytorch', default_scope='mmengine',
        env_cfg=dict(dist_cfg=dict(backend='gloo'))))
    runner = Runner.from_cfg(cfg)
    runner.train()
    times = runner.message_hub.get_scalar('train/time').data[0][DROPPED_ITERATIONS:]
    return statistics.median(times.tolist())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repetitions', type=int, default=5)
    parser.add_argument('--iters', type=int, default=15,
                        help=f'iterations per run, more than the {DROPPED_ITERATIONS} dropped')
    parser.add_argument('--log-interval', type=int, default=5,
                        help="LoggerHook's interval (MMEngine's default is 10)")
    args = parser.parse_args()
    if args.iters <= DROPPED_ITERATIONS:
        parser.error(f'--iters must be more than {DROPPED_ITERATIONS}: the first '
                     f'{DROPPED_ITERATIONS} iterations of every run are dropped')
    work_dir = tempfile.mkdtemp(prefix='bench_hook_')
    results = {}
    run(work_dir, 'warmup', WRAPPERS['GuardedDDP'], True, 5, args.log_interval)
    for repetition in range(args.repetitions):
        for wrapper_name, wrapper in WRAPPERS.items():
            for hook in (False, True):
                name = f'{wrapper_name}-{hook}-{repetition}'.replace(' ', '_')
                step = run(work_dir, name, wrapper, hook, args.iters, args.log_interval)
                results.setdefault((wrapper_name, hook), []).append(step)
    if dist.get_rank() == 0:
        print(f'\nUnusedParamsHook cost, 2 ranks gloo CPU, BEVConvNet (228 parameter tensors, '
              f'last head skipped per rank on alternating iterations); median of '
              f'{args.repetitions} interleaved repetitions of {args.iters} iterations, a log '
              f'line every {args.log_interval}')
        print(f'{"wrapper":<22} {"no hook ms":>11} {"hook ms":>9} {"ratio":>7}')
        for wrapper_name in WRAPPERS:
            without = statistics.median(results[(wrapper_name, False)]) * 1000
            with_hook = statistics.median(results[(wrapper_name, True)]) * 1000
            print(f'{wrapper_name:<22} {without:11.2f} {with_hook:9.2f} '
                  f'{with_hook / without:7.3f}')
    # Gloo ranks that exit with their group alive sometimes abort ("terminate called
    # without an active exception").
    leave_gloo_cleanly()  # the wrappers outlive the group: see the function


if __name__ == '__main__':
    MMLogger.get_instance('bench', log_level='WARNING')
    main()
