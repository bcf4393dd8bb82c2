"""Would plain DDP fail on this config? One process, no launcher, a few real iterations.

Builds the config's model and training dataloader with MMEngine's Runner, trains
``--iters`` iterations with :class:`UnusedParamsHook`, and reports whether plain DDP
(``find_unused_parameters=False``) would fail on this model, on which parameters, at which
iteration, what GuardedDDP would choose, and the config lines to add. Exits with 1 when
plain DDP would fail, so a job script can gate on it; 0 when it would not; 2 on bad usage.

One process sees the iterations it runs: unused parameters that appear only on some ranks
or after many iterations (a rare batch) need more iterations, or the hook in the real run.
"""
import argparse
import os
import tempfile

from mmengine.config import Config, DictAction
from mmengine.runner import Runner

from ..hooks import UnusedParamsHook
from ..usage_summary import summary_dict, summary_text

PLAIN_DDP_FAILS = 1


def check_config(cfg: Config, iters: int, work_dir: str) -> dict:
    """Trains ``iters`` iterations of ``cfg`` in this process; returns the usage summary."""
    cfg.launcher = 'none'
    cfg.work_dir = work_dir
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters)
    cfg.param_scheduler = []  # the config's schedules count epochs; a few steps need none
    for stage in ('val', 'test'):
        cfg[f'{stage}_dataloader'] = cfg[f'{stage}_cfg'] = cfg[f'{stage}_evaluator'] = None
    cfg.load_from, cfg.resume = None, False
    cfg.default_hooks = dict(cfg.get('default_hooks', {}),
                             checkpoint=dict(type='CheckpointHook', interval=10**9,
                                             by_epoch=False),
                             logger=dict(type='LoggerHook', interval=1))
    cfg.log_processor = dict(by_epoch=False)
    hooks = [h for h in cfg.get('custom_hooks', []) if h.get('type') != 'UnusedParamsHook']
    cfg.custom_hooks = hooks + [dict(type='UnusedParamsHook', interval=1, plot=False)]
    runner = Runner.from_cfg(cfg)
    runner.train()
    hook = next(h for h in runner.hooks if isinstance(h, UnusedParamsHook))
    return summary_dict(hook.record.table, hook.record.statistics, world_size=1)


def report(summary: dict) -> str:
    verdict = summary['verdict']
    setting = verdict['recommended_setting']
    lines = ['', '=' * 78, summary_text(summary), '']
    if verdict['plain_ddp_fails']:
        lines.append('GuardedDDP would choose mode \'complete\' (DDP fast path + completion of '
                     'the unused parameters\' reduction) and train it.')
    else:
        lines.append('GuardedDDP would choose mode \'complete\' and cost next to nothing; plain '
                     'DDP would also work on the iterations seen.')
    lines += ['Add to your config:',
              "    custom_imports = dict(imports=['mmdet3d_ddp_guard'], "
              'allow_failed_imports=False)',
              f'    {setting}',
              "    custom_hooks = [dict(type='UnusedParamsHook')]  # optional: per-iteration "
              'report',
              '(or inherit configs/_base_/ddp_guard.py), and delete any top-level '
              '`find_unused_parameters = ...` line.', '=' * 78]
    return '\n'.join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('config', help='the training config to check')
    parser.add_argument('--iters', type=int, default=4,
                        help='training iterations to run (default: 4)')
    parser.add_argument('--work-dir', default=None,
                        help='where the summary files go (default: a temporary folder)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                        help='key=value overrides, as in tools/train.py')


def main(args: argparse.Namespace) -> int:
    if args.iters <= 0:
        print(f'check: --iters must be a positive integer, not {args.iters}.')
        return 2
    if not os.path.isfile(args.config):
        print(f'check: no config file at {args.config!r}.')
        return 2
    cfg = Config.fromfile(args.config)
    cfg.merge_from_dict(args.cfg_options)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix='ddp_guard_check_')
    summary = check_config(cfg, args.iters, work_dir)
    print(report(summary))
    print(f'Summary files in {work_dir}')
    return PLAIN_DDP_FAILS if summary['verdict']['plain_ddp_fails'] else 0
