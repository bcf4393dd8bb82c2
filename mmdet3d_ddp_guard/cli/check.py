"""Would plain DDP fail or hang on this config with N GPUs? One process, no GPU, no launcher.

Simulates ``--world-size`` ranks for ``--iters`` iterations (see
:mod:`mmdet3d_ddp_guard.openmmlab2.rank_simulation`): every iteration runs the batch that the
config's sampler hands each rank through the real model, records which parameters each rank left
unused and which SyncBN-type layers ran where, then steps the config's optimizer once. It
reports, per iteration and overall, whether plain DDP (``find_unused_parameters=False``)
is ``ok``, ``fails`` or ``hangs`` there, on which ranks, with which parameters and layers,
what ``static_graph=True`` and GuardedDDP would do, and the config lines to add. Exits with 1
when plain DDP would fail or hang, so a job script can gate on it; 0 when not; 2 on bad usage.

The simulation sees what the data decides. It cannot see code that branches on
``dist.get_rank()``, per-rank augmentation randomness, or batch-norm synchronisation; and
only the iterations it runs: a rare batch needs more ``--iters``, or the hook in the real run.
"""
import argparse
import os
import os.path as osp
import tempfile

from mmengine.config import Config, DictAction

from ..core.ddp_outcome import HANGS, OK
from ..reporting.ddp_prediction import plot_prediction, predict, prediction_text, write_json
from ..core.forward_collectives import sync_norm_cfg_keys
from ..openmmlab2.rank_simulation import RankSimulation, SimulationError
from ..reporting.usage_summary import summary_dict, summary_text, write_summary

PLAIN_DDP_BREAKS = 1
BAD_USAGE = 2
#: Longer per-iteration tables go to a PNG in the work dir as well.
MAX_TABLE_ROWS = 20


def run_check(cfg: Config, world_size: int, iters: int):
    """Simulates ``world_size`` ranks for ``iters`` iterations of ``cfg``; returns the
    simulation, the usage summary and the prediction."""
    simulation = RankSimulation(cfg, world_size)
    iterations = simulation.run(iters)
    record = simulation.record
    prediction = predict(record.table, iterations, world_size, simulation.collectives.types,
                         sync_norm_cfg_keys(cfg.model))
    prediction.update(seed=simulation.seed, seed_from_config=simulation.seed_given)
    summary = summary_dict(record.table, record.statistics, world_size)
    plain = prediction['plain_ddp']
    # The prediction sees forward collectives too: its verdict is the summary's.
    summary['verdict'].update(plain_ddp_fails=plain['outcome'] != OK,
                              plain_ddp_outcome=plain['outcome'],
                              plain_ddp_first_failure_iteration=plain['first_iteration'])
    return simulation, summary, prediction


def report(summary: dict, prediction: dict, table) -> str:
    lines = ['', '=' * 78, summary_text(summary), '',
             prediction_text(prediction, table, max_rows=MAX_TABLE_ROWS)]
    if not prediction['seed_from_config']:
        lines.append(f'The config sets no randomness.seed, so a shuffling sampler orders the '
                     f'data differently in every run; this prediction used seed '
                     f'{prediction["seed"]}.')
    if prediction['plain_ddp']['outcome'] == HANGS:
        lines += ['', 'First replace the SyncBN-type layer(s) named above: no wrapper can '
                  'prevent that hang. Then, for the unused parameters, add to your config:']
    else:
        lines += ['', 'Add to your config:']
    lines += [
        "    custom_imports = dict(imports=['mmdet3d_ddp_guard'], allow_failed_imports=False)",
        f'    {summary["verdict"]["recommended_setting"]}',
        "    custom_hooks = [dict(type='UnusedParamsHook')]  # optional: per-iteration report",
        '(or inherit configs/_base_/ddp_guard.py), and delete any top-level '
        '`find_unused_parameters = ...` line.', '=' * 78]
    return '\n'.join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('config', help='the training config to check')
    parser.add_argument('--world-size', type=int, default=1,
                        help='number of ranks (GPUs) to simulate (default: 1)')
    parser.add_argument('--iters', type=int, default=4,
                        help='training iterations to simulate (default: 4)')
    parser.add_argument('--json', default=None, metavar='PATH',
                        help='write the prediction (per iteration and rank) as JSON here')
    parser.add_argument('--png', default=None, metavar='PATH',
                        help='draw iterations x ranks (unused, fails, hangs) into this PNG')
    parser.add_argument('--work-dir', default=None,
                        help='where the summary files go (default: a temporary folder)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                        help='key=value overrides, as in tools/train.py')


def _usage_error(args: argparse.Namespace):
    if args.iters <= 0:
        return f'--iters must be a positive integer, not {args.iters}.'
    if args.world_size < 1:
        return f'--world-size must be a positive integer (the number of GPUs), not ' \
               f'{args.world_size}.'
    if not osp.isfile(args.config):
        return f'no config file at {args.config!r}.'
    for option in ('json', 'png'):
        path = getattr(args, option)
        if path and not osp.isdir(osp.dirname(osp.abspath(path))):
            return f'--{option} {path!r}: the folder {osp.dirname(osp.abspath(path))!r} ' \
                   'does not exist.'
    return None


def main(args: argparse.Namespace) -> int:
    problem = _usage_error(args)
    if problem:
        print(f'check: {problem}')
        return BAD_USAGE
    cfg = Config.fromfile(args.config)
    cfg.merge_from_dict(args.cfg_options)
    try:
        simulation, summary, prediction = run_check(cfg, args.world_size, args.iters)
    except SimulationError as error:
        print(f'check: {error}')
        return BAD_USAGE
    table = simulation.record.table
    print(report(summary, prediction, table))
    work_dir = args.work_dir or tempfile.mkdtemp(prefix='ddp_guard_check_')
    os.makedirs(work_dir, exist_ok=True)
    history = [dict(iter=it.iteration, unused_per_rank=[list(ids) for ids in it.unused_per_rank])
               for it in simulation.iterations]
    paths = write_summary(work_dir, 'unused_params', summary, table, history, plot=False)
    png = args.png or (osp.join(work_dir, 'ddp_prediction.png')
                       if len(history) > MAX_TABLE_ROWS else None)
    for path, write in ((args.json, write_json), (png, plot_prediction)):
        if path:
            write(prediction, path)
            print(f'Wrote {path}')
    print(f'Summary files in {work_dir}: {", ".join(osp.basename(p) for p in paths.values())}')
    return PLAIN_DDP_BREAKS if prediction['plain_ddp']['outcome'] != OK else 0
