"""Would plain DDP fail or hang on this config with N GPUs? One process, no GPU, no launcher.

Simulates ``--world-size`` ranks for ``--iters`` iterations (see
:mod:`mmdet3d_ddp_guard.rank_simulation.mmengine_ranks` for an MMEngine config and
:mod:`mmdet3d_ddp_guard.rank_simulation.mmcv1_ranks` for an mmcv-full 1.x one, chosen by
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
import ast
import os
import os.path as osp
import sys
import tempfile
from typing import Any, Dict, Mapping, Optional, Sequence

from ..messages.config_lines import LINES, MMCV1_LINES
from ..messages.ddp_outcome import HANGS, OK
from ..guard.forward_collectives import sync_norm_cfg_keys
from ..environment.frameworks import MMCV1, MMENGINE, installed_frameworks
from ..rank_simulation.simulated_ranks import SimulationError, import_codebase_module
from ..rank_simulation.ddp_prediction import plot_prediction, predict, prediction_text, write_json
from ..reporting.usage_summary import summary_dict, summary_text, write_summary

PLAIN_DDP_BREAKS = 1
BAD_USAGE = 2
#: Longer per-iteration tables go to a PNG in the work dir as well.
MAX_TABLE_ROWS = 20
#: Top-level keys only an MMEngine config has (mmcv 1.x reads none of them).
MMENGINE_MARKERS = ('optim_wrapper', 'train_dataloader', 'default_scope')
#: The frameworks as the usage errors name them.
FRAMEWORK_NAMES = {MMENGINE: 'MMEngine (OpenMMLab 2.x)',
                   MMCV1: 'mmcv-full 1.x (OpenMMLab 1.x: mmdet 2.x, mmdet3d 0.x)'}
#: mmcv 1.x's runners, named by ``runner = dict(type=...)`` in a 1.x config.
MMCV1_RUNNERS = ('IterBasedRunner', 'EpochBasedRunner')
#: The config key each framework's training takes its seed from (``--seed`` sets it; the
#: mmcv 1.x train scripts set ``cfg.seed`` from their own ``--seed`` whatever the config says).
SEED_KEYS = {MMENGINE: 'randomness.seed', MMCV1: 'seed'}
#: Whose ``tools/train.py --seed`` defaults to the seed check simulates for a 1.x config.
MMCV1_SEED_SCRIPTS = 'BEVFormer, UniAD, StreamPETR and PETR (and in mmdet3d 0.17.1)'

#: The module the guard's import line adds to ``custom_imports``.
GUARD_MODULE = 'mmdet3d_ddp_guard'


def framework_of_config(cfg: Mapping[str, Any]) -> Optional[str]:
    """``'mmengine'`` or ``'mmcv-full'``: which framework's training a config is written for,
    from its top-level keys; None when they say neither.

    MMEngine's keys (``optim_wrapper``, ``train_dataloader``, ``default_scope``, or a
    ``train_cfg`` loop) win; else mmcv 1.x's (``optimizer_config``, ``runner`` of type
    ``IterBasedRunner``/``EpochBasedRunner``, or ``data.train``).

    Args:
        cfg (Mapping): The config's top-level keys (either framework's ``Config``, or
            :func:`config_file_keys`).
    """
    if any(key in cfg for key in MMENGINE_MARKERS):
        return MMENGINE
    train_cfg = cfg.get('train_cfg')
    if isinstance(train_cfg, Mapping) and (
            str(train_cfg.get('type', '')).endswith('TrainLoop')
            or 'max_epochs' in train_cfg or 'max_iters' in train_cfg):
        return MMENGINE
    runner, data = cfg.get('runner'), cfg.get('data')
    if 'optimizer_config' in cfg \
            or isinstance(runner, Mapping) and runner.get('type') in MMCV1_RUNNERS \
            or isinstance(data, Mapping) and 'train' in data:
        return MMCV1
    return None


def config_file_keys(path: str, depth: int = 0) -> Dict[str, Any]:
    """The top-level keys of a Python config and of its ``_base_`` files (those given by a
    path; ``pkg::`` ones are skipped), read from the source without running it, so without
    either framework: literal values and ``dict(...)`` calls as dicts, other values None.

    Args:
        path (str): The config file.
        depth (int): The ``_base_`` nesting so far (a cycle stops at 8).
    """
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    keys: Dict[str, Any] = {}
    own: Dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    own[target.id] = _literal(node.value)
    bases = own.pop('_base_', None)
    for base in ([bases] if isinstance(bases, str) else bases or []) if depth < 8 else []:
        if isinstance(base, str) and '::' not in base:
            base_path = osp.join(osp.dirname(path), base)
            if osp.isfile(base_path):
                _merge(keys, config_file_keys(base_path, depth + 1))
    _merge(keys, own)
    return keys


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == 'dict':
        return {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg}
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)
                if k is not None}
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _merge(into: Dict[str, Any], new: Dict[str, Any]) -> None:
    # As the configs merge: a child's dict updates its base's, other values replace it.
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def written_for(path: str) -> Optional[str]:
    """:func:`framework_of_config` of the config file at ``path``; None when its keys say
    neither or its source cannot be read without running it."""
    try:
        return framework_of_config(config_file_keys(path))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


def config_framework(path: str) -> str:
    """The framework whose adapter simulates the config at ``path``: the installed one when
    only one is (each adapter reads only its own framework's configs); where both are, the
    one the config is :func:`written_for`, and MMEngine when that says neither.

    Args:
        path (str): The config file.
    """
    installed = installed_frameworks()
    if len(installed) == 1:
        return next(iter(installed))
    return written_for(path) or MMENGINE


def load_config(path: str, framework: str):
    """The config at ``path`` read by ``framework``'s ``Config`` (custom imports done)."""
    if framework == MMCV1:
        from mmcv import Config
    else:
        from mmengine.config import Config
    return Config.fromfile(path)


def _simulation_class(framework: str):
    # Imported here, so that the command works where only one framework is installed.
    if framework == MMCV1:
        from ..rank_simulation.mmcv1_ranks import RankSimulation
    else:
        from ..rank_simulation.mmengine_ranks import RankSimulation
    return RankSimulation


def _dict_action():
    """``--cfg-options``' action: MMEngine's where installed, else mmcv 1.x's (the same
    ``key=value`` syntax)."""
    if MMENGINE in installed_frameworks():
        from mmengine.config import DictAction
    else:
        from mmcv import DictAction
    return DictAction


def import_line(custom_imports: Optional[Mapping] = None) -> str:
    """The ``custom_imports`` line that imports the guard, for the end of a config whose
    merged ``custom_imports`` is ``custom_imports``: its list with the guard added and its
    ``allow_failed_imports`` kept, since the line replaces the list the config has.

    Args:
        custom_imports (Mapping): The config's ``custom_imports``, or None.
    """
    if not custom_imports:
        return MMCV1_LINES.guard
    imports = custom_imports.get('imports') or []
    # mmcv's and MMEngine's import_modules_from_strings take one name as well as a list.
    imports = [imports] if isinstance(imports, str) else list(imports)
    if GUARD_MODULE not in imports:
        imports.append(GUARD_MODULE)
    allow = custom_imports.get('allow_failed_imports', False)
    return f'custom_imports = dict(imports={imports!r}, allow_failed_imports={allow!r})'


def run_check(cfg, world_size: int, iters: int, framework: str = MMENGINE,
              seed: Optional[int] = None, config_path: Optional[str] = None):
    """Simulates ``world_size`` ranks for ``iters`` iterations of ``cfg``; returns the
    simulation, the usage summary and the prediction.

    Args:
        cfg (Config): The training config, read by ``framework``'s ``Config``.
        world_size (int): Number of simulated ranks.
        iters (int): Iterations to simulate.
        framework (str): ``'mmengine'`` or ``'mmcv-full'`` (:func:`config_framework`).
        seed (int): Set as the config's seed (:data:`SEED_KEYS`), as ``tools/train.py
            --seed`` sets it. None: under MMEngine the config's; under mmcv 1.x the
            ``--seed`` default of the BEV codebases' ``tools/train.py`` (0), since no 1.x
            train script reads the config's.
        config_path (str): The config's path as given (mmcv 1.x: a ``plugin=True`` config
            without ``plugin_dir`` imports its folder); default ``cfg.filename``.
    """
    if framework == MMCV1:
        simulation = _simulation_class(framework)(cfg, world_size, seed=seed,
                                                  config_path=config_path)
    else:
        if seed is not None:
            cfg.merge_from_dict({SEED_KEYS[framework]: seed})
        simulation = _simulation_class(framework)(cfg, world_size)
    iterations = simulation.run(iters)
    record = simulation.record
    prediction = predict(record.table, iterations, world_size, simulation.collectives.types,
                         sync_norm_cfg_keys(cfg.model))
    prediction.update(seed=simulation.seed, seed_from_config=simulation.seed_given)
    # Under mmcv 1.x the guard's setting is its import line, pasted over the config's own.
    guard = import_line(cfg.get('custom_imports')) if framework == MMCV1 \
        else LINES[framework].guard
    summary = summary_dict(record.table, record.statistics, world_size, guard)
    plain = prediction['plain_ddp']
    # The prediction sees forward collectives too: its verdict is the summary's.
    summary['verdict'].update(plain_ddp_fails=plain['outcome'] != OK,
                              plain_ddp_outcome=plain['outcome'],
                              plain_ddp_first_failure_iteration=plain['first_iteration'])
    return simulation, summary, prediction


def mmcv1_seed_text(seed: int, config_seed: Any = None) -> str:
    """What the report says of the seed of a 1.x config simulated without ``--seed``.

    Args:
        seed (int): The seed simulated (the BEV codebases' ``--seed`` default).
        config_seed: The ``seed`` the config writes, None where it writes none.
    """
    text = (f'No --seed given: simulated with seed {seed}, the --seed default of '
            f'tools/train.py in {MMCV1_SEED_SCRIPTS}, which set cfg.seed = args.seed.')
    if config_seed is not None:
        text += (f' The config\'s seed = {config_seed!r} is not what these train scripts '
                 'use: each overwrites cfg.seed with its --seed.')
    return text + (' mmdet 2.x\'s own tools/train.py (init_random_seed, as in 2.28) draws '
                   'a random seed when not given --seed, and a shuffling sampler orders the '
                   'data by it: give check the --seed your training gets.')


def report(summary: dict, prediction: dict, table, framework: str = MMENGINE,
           custom_imports: Optional[Mapping] = None, config_seed: Any = None,
           notes: Sequence[str] = ()) -> str:
    """The text the command prints: the summary, the prediction and the config advice.

    Args:
        summary (dict): :func:`summary_dict`'s, as :func:`run_check` returns it.
        prediction (dict): :func:`predict`'s, as :func:`run_check` returns it.
        table (ParamTable): The names of the parameter ids.
        framework (str): The config's framework (:func:`config_framework`).
        custom_imports (Mapping): The config's ``custom_imports`` (:func:`import_line`).
        config_seed: The ``seed`` a 1.x config writes (:func:`mmcv1_seed_text`).
        notes (list[str]): More to say about how the config was read (the 1.x plugin).
    """
    lines = ['', '=' * 78, summary_text(summary), '',
             prediction_text(prediction, table, max_rows=MAX_TABLE_ROWS)]
    if not prediction['seed_from_config'] and framework == MMCV1:
        lines.append(mmcv1_seed_text(prediction['seed'], config_seed))
    elif not prediction['seed_from_config']:
        lines.append(f'The config sets no randomness.seed, so a shuffling sampler orders the '
                     f'data differently in every run; this prediction used seed '
                     f'{prediction["seed"]} (--seed sets one).')
    lines += list(notes)
    if prediction['plain_ddp']['outcome'] == HANGS:
        lines += ['', 'First replace the SyncBN-type layer(s) named above: no wrapper can '
                  'prevent that hang. Then, for the unused parameters, add to your config:']
    else:
        lines += ['', 'Add to your config:']
    lines.append(f'    {import_line(custom_imports)}')
    if framework == MMCV1:
        lines += ['(it guards every MMDistributedDataParallel the training builds), and '
                  'delete any top-level `find_unused_parameters = ...` line.', '=' * 78]
        return '\n'.join(lines)
    lines += [
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
    parser.add_argument('--seed', type=int, default=None,
                        help="the training's seed; a shuffling sampler orders the data by "
                             'it. mmcv-full 1.x: the --seed of its tools/train.py, set as '
                             "cfg.seed over the config's own seed as those scripts set it; "
                             "default 0, the --seed default of the BEV codebases' "
                             'tools/train.py (BEVFormer, UniAD, StreamPETR, PETR; mmdet '
                             "2.x's draws a random one). MMEngine: set as randomness.seed; "
                             "default the config's, else a random one, as its Runner draws")
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


def custom_import_problem(path: str) -> Optional[str]:
    """Why a module of the config's ``custom_imports`` cannot be imported (naming it and the
    fix, see :func:`import_codebase_module`), read from the config's source; None when each
    imports or the source does not say.

    Args:
        path (str): The config file.
    """
    try:
        custom = config_file_keys(path).get('custom_imports')
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    imports = custom.get('imports') if isinstance(custom, Mapping) else None
    for name in [imports] if isinstance(imports, str) else imports or []:
        if isinstance(name, str):
            try:
                import_codebase_module(name, "in the config's custom_imports")
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
    wanted = written_for(args.config)
    if wanted is not None and wanted != framework:
        print(f'check: {args.config} is written for {FRAMEWORK_NAMES[wanted]}, which is not '
              f'installed here (only {FRAMEWORK_NAMES[framework]} is); check it where its '
              'training runs.')
        return BAD_USAGE
    try:
        cfg = load_config(args.config, framework)
    except ImportError:
        # Both Configs re-raise a failed custom import without naming the module (mmcv 1.x)
        # or the fix.
        problem = custom_import_problem(args.config)
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
    print(report(summary, prediction, table, framework, cfg.get('custom_imports'),
                 config_seed=getattr(simulation, 'config_seed', None),
                 notes=[note for note in [getattr(simulation, 'plugin_note', None)] if note]))
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
