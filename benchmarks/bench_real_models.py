"""Time per iteration of the real mmdet3d example models on 2 CPU ranks: GuardedDDP against
plain DDP with find_unused_parameters=True, through mmdet3d's own tools/train.py.

    .venv/bin/python benchmarks/bench_real_models.py [--iters 6] [--repetitions 2]
        [--models pointpillars ...]

Runs alternate between the two wrappers (interleaved repetitions); a run's figure is the
median of MMEngine's per-iteration ``time`` over its iterations after the first; the table
shows the median over repetitions. Writes the tiny datasets first when data/tiny is missing.
``--models`` keeps the models whose name or config path holds one of its words, in any case
(``centerpoint``, ``pointpillars``, ``smoke``); every model by default.
"""
import argparse
import os.path as osp
import re
import statistics
import tempfile

import repo_root  # noqa: F401,I100 (tests/ and demo/ importable: not installed)

from demo.launch import torchrun_train
from demo.make_tiny_data import DEFAULT_ROOT, make_tiny_data

CONFIGS = {
    'CenterPoint + gated layer (nuScenes)':
        'configs/centerpoint/centerpoint_pillar02_gated-refiner_tiny-nus-3d.py',
    'PointPillars (KITTI)': 'configs/pointpillars/pointpillars_hv_secfpn_tiny-kitti-3d-3class.py',
    'SMOKE (KITTI mono, 640x192)': 'configs/smoke/smoke_dla34_dlaneck_gn-all_tiny-kitti-mono3d.py',
}
WRAPPERS = {
    'GuardedDDP': [],
    'DDP find_unused=True': ['model_wrapper_cfg.type=CPUCompatibleMMDDP',
                             'model_wrapper_cfg.find_unused_parameters=True'],
}
ITERATION_TIME = re.compile(r'Iter\(train\) \[\s*(\d+)/\d+\].*?\btime: ([0-9.]+)')


def median_step(output: str) -> float:
    times = [float(t) for i, t in ITERATION_TIME.findall(output) if int(i) > 1]
    if not times:
        raise RuntimeError('no iteration lines in the output:\n' + output[-3000:])
    return statistics.median(times)


def chosen_models(words) -> dict:
    """The rows of CONFIGS whose name or config path holds one of ``words`` (any case);
    every row without words."""
    if not words:
        return dict(CONFIGS)
    unknown = [w for w in words
               if not any(w.lower() in f'{m} {c}'.lower() for m, c in CONFIGS.items())]
    if unknown:
        raise SystemExit(f'--models: {", ".join(unknown)} names none of: '
                         + '; '.join(CONFIGS))
    return {model: config for model, config in CONFIGS.items()
            if any(w.lower() in f'{model} {config}'.lower() for w in words)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--iters', type=int, default=6)
    parser.add_argument('--repetitions', type=int, default=2)
    parser.add_argument('--models', nargs='+', default=None, metavar='WORD',
                        help='only the models whose name or config path holds one of these '
                        'words, any case (centerpoint, pointpillars, smoke); default: all')
    args = parser.parse_args()
    models = chosen_models(args.models)
    if not osp.isdir(DEFAULT_ROOT):
        make_tiny_data(DEFAULT_ROOT)
    work_root = tempfile.mkdtemp(prefix='bench_real_')
    results = {}
    for repetition in range(args.repetitions):
        for model, config in models.items():
            for wrapper, options in WRAPPERS.items():
                run = torchrun_train(
                    config, osp.join(work_root, f'{repetition}_{len(results)}'),
                    cfg_options=options + [f'train_cfg.max_iters={args.iters}',
                                           'log_processor.window_size=1'],
                    timeout=900)
                if run.returncode != 0:
                    raise RuntimeError(f'{model} under {wrapper} failed:\n'
                                       + run.output[-3000:])
                results.setdefault((model, wrapper), []).append(median_step(run.output))
                print(f'{model:<38} {wrapper:<22} {results[(model, wrapper)][-1]:.2f} s',
                      flush=True)
    print(f'\nSeconds per iteration, 2 gloo CPU ranks, median of {args.repetitions} '
          f'interleaved runs of {args.iters} iterations (first iteration dropped)')
    print(f'{"model":<38} {"DDP find_unused=True":>21} {"GuardedDDP":>11} {"ratio":>6}')
    for model in models:
        base = statistics.median(results[(model, 'DDP find_unused=True')])
        guarded = statistics.median(results[(model, 'GuardedDDP')])
        print(f'{model:<38} {base:21.2f} {guarded:11.2f} {guarded / base:6.3f}')


if __name__ == '__main__':
    main()
