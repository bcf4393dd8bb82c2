"""``python -m demo`` (``make demo``), from the repository root: the same model and config
under plain DDP (which dies) and under GuardedDDP.

Both runs go through MMDetection3D's own ``tools/train.py`` under torchrun with 2 processes
(gloo on CPU), exactly as a user launches training; only ``model_wrapper_cfg`` differs. The
default is the CenterPoint example (mmdet3d's CenterPoint pillar nuScenes config plus a layer
that runs only for batches with a pedestrian) on the tiny nuScenes data, written first when
``data/tiny`` is missing.
"""
import argparse
import os.path as osp
import re
import sys
import tempfile
from typing import List

import torch

from demo.launch import TrainRun, torchrun_train
from demo.make_tiny_data import DEFAULT_ROOT, make_tiny_data

REPO_CONFIGS = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'configs')
TOY_CONFIG = osp.join(REPO_CONFIGS, 'toy', 'toy_detector_skip_branch.py')
DEFAULT_CONFIG = osp.join(REPO_CONFIGS, 'centerpoint',
                          'centerpoint_pillar02_gated-refiner_tiny-nus-3d.py')
_RANK_PREFIX = re.compile(r'^\[rank\d+\]:\s*')
_LOG_PREFIX = re.compile(r'^\d\d/\d\d \d\d:\d\d:\d\d - mmengine - \w+ - ')


def plain_ddp_options() -> List[str]:
    """The config as it was before the guard: plain DDP and no UnusedParamsHook (which would
    replace DDP's error with its own)."""
    wrapper = 'MMDistributedDataParallel' if torch.cuda.is_available() else 'CPUCompatibleMMDDP'
    return [f'model_wrapper_cfg.type={wrapper}',
            'model_wrapper_cfg.find_unused_parameters=False', 'custom_hooks=[]']


def real_error_lines(output: str) -> List[str]:
    """DDP's error, dug out of torchrun's wall of tracebacks."""
    wanted = []
    for line in output.splitlines():
        line = _RANK_PREFIX.sub('', line).strip()
        if ('Expected to have finished reduction' in line
                or 'did not receive grad for rank' in line):
            wanted.append(line)
    # Every rank prints the same error: keep one copy of each line, in order.
    return list(dict.fromkeys(wanted))


def logged_blocks(output: str, marker: str) -> List[str]:
    """Log records containing ``marker``, with their indented continuation lines."""
    lines, keep = [], False
    for line in output.splitlines():
        if _LOG_PREFIX.match(line):
            keep = marker in line
            if keep:
                lines.append(_LOG_PREFIX.sub('', line))
        elif keep and line.startswith('  '):
            lines.append(line)
        else:
            keep = False
    return lines


def summarise_failure(run: TrainRun) -> List[str]:
    if run.timed_out:
        return [f'HUNG: no progress, killed after {run.seconds:.0f} s.']
    if run.returncode == 0:
        return ['unexpectedly trained without error.']
    summary = [f'FAILED after {run.seconds:.1f} s (exit code {run.returncode})'
               + (', torchrun reported ChildFailedError' if 'ChildFailedError' in run.output
                  else '') + '.', 'The real error, buried in the ranks\' logs:']
    errors = real_error_lines(run.output)
    summary += [f'  {line}' for line in errors] or ['  (no DDP error found; last lines:)'] + [
        f'  {line}' for line in run.output.splitlines()[-10:]]
    return summary


def run_demo(config: str, work_dir: str, timeout: float, extra_options: List[str]) -> int:
    print(f'== 1/2  plain DDP (find_unused_parameters=False) on {osp.basename(config)}, '
          '2 processes ==', flush=True)
    plain = torchrun_train(config, osp.join(work_dir, 'plain_ddp'),
                           cfg_options=plain_ddp_options() + extra_options, timeout=timeout)
    print('\n'.join(summarise_failure(plain)), flush=True)
    print('\n== 2/2  the same config under GuardedDDP ==', flush=True)
    guarded = torchrun_train(config, osp.join(work_dir, 'guarded_ddp'),
                             cfg_options=extra_options, timeout=timeout)
    for marker in ('GuardedDDP decision', 'UnusedParamsHook:', 'Iter(train)',
                   'UnusedParamsHook summary'):
        print('\n'.join(logged_blocks(guarded.output, marker)))
    if guarded.returncode != 0 or guarded.timed_out:
        print(f'GuardedDDP run FAILED (exit code {guarded.returncode}); its last lines:')
        print('\n'.join(guarded.output.splitlines()[-40:]))
        return 1
    print(f'\nGuardedDDP trained in {guarded.seconds:.1f} s; logs and summaries in '
          f'{osp.join(work_dir, "guarded_ddp")}.')
    return 0 if plain.returncode != 0 or plain.timed_out else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('config', nargs='?', default=DEFAULT_CONFIG,
                        help='config to run (default: the CenterPoint example; '
                        f'{osp.relpath(TOY_CONFIG)} is a 20-second one)')
    parser.add_argument('--work-dir', default=None,
                        help='where both runs write (default: a new temporary folder)')
    parser.add_argument('--timeout', type=float, default=600,
                        help='seconds before a run counts as hung (default: 600)')
    parser.add_argument('--cfg-options', nargs='+', default=[],
                        help='key=value overrides for both runs, as in tools/train.py')


def main(args: argparse.Namespace) -> int:
    if args.config == DEFAULT_CONFIG and not osp.isdir(DEFAULT_ROOT):
        print(f'Writing the tiny datasets into {DEFAULT_ROOT}/ first.', flush=True)
        make_tiny_data(DEFAULT_ROOT)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix='ddp_guard_demo_')
    return run_demo(args.config, work_dir, args.timeout, args.cfg_options)


if __name__ == '__main__':
    parser = argparse.ArgumentParser(prog='python -m demo', description=__doc__)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
