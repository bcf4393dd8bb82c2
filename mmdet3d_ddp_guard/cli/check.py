"""Would plain DDP fail or hang on this config with N GPUs? One process, no GPU, no launcher.

Simulates ``--world-size`` ranks for ``--iters`` iterations (see
:mod:`mmdet3d_ddp_guard.openmmlab2.rank_simulation` for an MMEngine config and
:mod:`mmdet3d_ddp_guard.openmmlab1.rank_simulation` for an mmcv-full 1.x one, chosen by
:func:`config_framework`): every iteration runs the batch that the
config's sampler hands each rank through the real model, records which parameters each rank left
unused and which SyncBN-type layers ran where, then steps the config's optimizer once. It
reports, per iteration and overall, whether plain DDP (``find_unused_parameters=False``)
is ``ok``, ``fails`` or ``hangs`` there, on which ranks, with which parameters and layers,
what ``static_graph=True`` and GuardedDDP would do, and the config lines to add. Exits with 1
when plain DDP would fail or hang, so a job script can gate on it; 0 when not; 2 on bad usage.

The simulation sees what the data decides. It cannot see code that branches on
``dist.get_rank()``, per-rank augmentation randomness, or batch-norm synchronisation; nor
what a rank keeps in its model between iterations: the simulated ranks share one model
instance, so a streaming model's memory (StreamPETR's memory queue, Sparse4D's instance bank)
holds the other simulated rank's state, not its own rank's; and it sees only the iterations
it runs: a rare batch needs more ``--iters``, or the hook in the real run.

Under mmcv 1.x it follows the BEV codebases' ``tools/train.py``: the seed is their ``--seed``
(0 unless given; the config's own ``seed`` is not read), and the plugin module is the one
their code derives from ``plugin_dir``. The working directory goes on ``sys.path``, as
``python -m`` puts it there, so that the installed ``mmdet3d-ddp-guard`` script, run from a
codebase's root, imports its ``projects.mmdet3d_plugin`` too.
"""
import argparse
import importlib
import os
import os.path as osp
import sys
import tempfile
from typing import Mapping, Optional

from ..environment.framework_table import FRAMEWORKS, rows_of
from ..environment.framework_table import framework as framework_row
from ..environment.frameworks import installed_frameworks
from ..messages.ddp_outcome import OK
from ..rank_simulation.check_report import MAX_TABLE_ROWS, import_line, report
from ..rank_simulation.config_framework import (config_file_keys, config_framework,
                                                config_frameworks, written_for)
from ..rank_simulation.ddp_prediction import plot_prediction, predict, write_json
from ..rank_simulation.forward_collective_counts import sync_norm_cfg_keys
from ..rank_simulation.simulated_ranks import SimulationError, import_codebase_module
from ..reporting.summary import summary_dict, write_summary

PLAIN_DDP_BREAKS = 1
BAD_USAGE = 2


def _adapter_module(framework: str, module: str):
    """``module`` of ``framework``'s adapter (its row's ``adapter`` package), imported here,
    so that the command works where only one framework is installed."""
    package = __package__.rpartition('.')[0]
    return importlib.import_module(f'{package}.{framework_row(framework).adapter}.{module}')


def _config_reading(framework: str):
    """``framework``'s adapter module that reads a config (its ``load_config`` and
    ``DictAction``)."""
    return _adapter_module(framework, 'config_reading')


def load_config(path: str, framework: str):
    """The config at ``path`` read by ``framework``'s ``Config`` (custom imports done)."""
    return _config_reading(framework).load_config(path)


def _dict_action():
    """``--cfg-options``' action: the first installed framework's that reads configs, in
    the table's order (MMEngine's where installed, else mmcv 1.x's: the same ``key=value``
    syntax); argparse's own where none is (``check`` then says why it has nothing to do)."""
    readers = config_frameworks()
    return _config_reading(readers[0]).DictAction if readers else None


def nothing_to_check() -> str:
    """What ``check`` says where no installed framework reads configs: what each installed
    one does without a config, and what to install to check a config."""
    installed = rows_of(installed_frameworks())
    return ' '.join([row.without_a_config for row in installed] + [
        'To check a config, install ' + ', or '.join(
            row.to_install for row in FRAMEWORKS if row.reads_configs) + '.'])


def run_check(cfg, world_size: int, iters: int, framework: str,
              seed: Optional[int] = None, config_path: Optional[str] = None):
    """Simulates ``world_size`` ranks for ``iters`` iterations of ``cfg``; returns the
    simulation, the usage summary and the prediction.

    Args:
        cfg (Config): The training config, read by ``framework``'s ``Config``.
        world_size (int): Number of simulated ranks.
        iters (int): Iterations to simulate.
        framework (str): The config's framework's name (:func:`config_framework`).
        seed (int): Set as the config's seed (its row's ``seed_key``), as ``tools/train.py
            --seed`` sets it. None: under MMEngine the config's; where the train scripts set
            the seed (mmcv 1.x), the ``--seed`` default of the BEV codebases'
            ``tools/train.py`` (0), since no 1.x train script reads the config's.
        config_path (str): The config's path as given (mmcv 1.x: a ``plugin=True`` config
            without ``plugin_dir`` imports its folder); default ``cfg.filename``.
    """
    row = framework_row(framework)
    simulation_class = _adapter_module(framework, 'rank_simulation').RankSimulation
    if row.seed_set_by_train_script:
        simulation = simulation_class(cfg, world_size, seed=seed, config_path=config_path)
    else:
        if seed is not None:
            cfg.merge_from_dict({row.seed_key: seed})
        simulation = simulation_class(cfg, world_size)
    iterations = simulation.run(iters)
    record = simulation.record
    prediction = predict(record.table, iterations, world_size, simulation.collectives.types,
                         sync_norm_cfg_keys(cfg.model))
    prediction.update(seed=simulation.seed, seed_from_config=simulation.seed_given)
    # Under mmcv 1.x the guard's setting is its import line, pasted over the config's own.
    guard = import_line(cfg.get(row.imports_key), row.imports_key) \
        if row.guard_is_import_line else row.lines.guard
    summary = summary_dict(record.table, record.statistics, world_size, guard)
    plain = prediction['plain_ddp']
    # The prediction sees forward collectives too: its verdict is the summary's.
    summary['verdict'].update(plain_ddp_fails=plain['outcome'] != OK,
                              plain_ddp_outcome=plain['outcome'],
                              plain_ddp_first_failure_iteration=plain['first_iteration'])
    return simulation, summary, prediction


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
    parser.add_argument('--seed', type=int, default=None,
                        help="the training's seed; a shuffling sampler orders the data by "
                             'it. ' + '. '.join(row.seed_help for row in reversed(FRAMEWORKS)
                                                 if row.seed_help))
    parser.add_argument('--work-dir', default=None,
                        help='where the summary files go (default: a temporary folder)')
    parser.add_argument('--cfg-options', nargs='+', action=_dict_action(), default={},
                        help='key=value overrides, as in tools/train.py')


def _usage_error(args: argparse.Namespace):
    if args.iters <= 0:
        return f'--iters must be a positive integer, not {args.iters}.'
    if args.world_size < 1:
        return f'--world-size must be a positive integer (the number of GPUs), not ' \
               f'{args.world_size}.'
    if args.seed is not None and not 0 <= args.seed < 2**32:
        return '--seed must be an integer from 0 to 2**32 - 1 (the range numpy seeds ' \
               f'take), not {args.seed}.'
    if not osp.isfile(args.config):
        return f'no config file at {args.config!r}.'
    for option in ('json', 'png'):
        path = getattr(args, option)
        if path and not osp.isdir(osp.dirname(osp.abspath(path))):
            return f'--{option} {path!r}: the folder {osp.dirname(osp.abspath(path))!r} ' \
                   'does not exist.'
    return None


def working_directory_on_path() -> None:
    """Puts the working directory first on ``sys.path`` unless it is there already, as
    ``python -m`` does. The installed ``mmdet3d-ddp-guard`` script has its own folder there
    instead, and a codebase's plugin (``projects.mmdet3d_plugin``, in ``custom_imports`` or
    ``plugin_dir``) is imported from the codebase's root, which its ``tools/dist_train.sh``
    puts on ``PYTHONPATH``."""
    cwd = os.getcwd()
    if all(osp.abspath(str(entry) or os.curdir) != cwd for entry in sys.path):
        sys.path.insert(0, cwd)


def custom_import_problem(path: str, key: str) -> Optional[str]:
    """Why a module of the config's ``custom_imports`` cannot be imported (naming it and the
    fix, see :func:`import_codebase_module`), read from the config's source; None when each
    imports or the source does not say.

    Args:
        path (str): The config file.
        key (str): The config key of the modules it imports (its framework's row's
            ``imports_key``).
    """
    try:
        custom = config_file_keys(path).get(key)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    imports = custom.get('imports') if isinstance(custom, Mapping) else None
    for name in [imports] if isinstance(imports, str) else imports or []:
        if isinstance(name, str):
            try:
                import_codebase_module(name, f"in the config's {key}")
            except SimulationError as error:
                return str(error)
    return None


def main(args: argparse.Namespace) -> int:
    problem = _usage_error(args)
    if problem:
        print(f'check: {problem}')
        return BAD_USAGE
    working_directory_on_path()
    framework = config_framework(args.config)
    if framework is None:
        print(f'check: {nothing_to_check()}')
        return BAD_USAGE
    wanted = written_for(args.config)
    if wanted is not None and wanted != framework:
        print(f'check: {args.config} is written for {framework_row(wanted).title}, which is '
              f'not installed here (only {framework_row(framework).title} is); check it where '
              'its training runs.')
        return BAD_USAGE
    try:
        cfg = load_config(args.config, framework)
    except ImportError:
        # Both Configs re-raise a failed custom import without naming the module (mmcv 1.x)
        # or the fix.
        problem = custom_import_problem(args.config, framework_row(framework).imports_key)
        if problem is None:
            raise
        print(f'check: {problem}')
        return BAD_USAGE
    cfg.merge_from_dict(args.cfg_options)
    try:
        simulation, summary, prediction = run_check(cfg, args.world_size, args.iters,
                                                    framework, args.seed, args.config)
    except SimulationError as error:
        print(f'check: {error}')
        return BAD_USAGE
    table = simulation.record.table
    print(report(summary, prediction, table, framework,
                 cfg.get(framework_row(framework).imports_key),
                 config_seed=getattr(simulation, 'config_seed', None),
                 notes=[note for note in [getattr(simulation, 'plugin_note', None)] if note]))
    work_dir = args.work_dir or tempfile.mkdtemp(prefix='ddp_guard_check_')
    os.makedirs(work_dir, exist_ok=True)
    history = [dict(iter=it.iteration,
                    unused_per_rank=[list(ids) for ids in it.unused_per_rank])
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
