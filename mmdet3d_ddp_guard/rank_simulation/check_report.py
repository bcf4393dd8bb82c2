"""The report ``check`` prints: the usage summary, the prediction, and the lines to add.

What plain DDP would do (:mod:`.ddp_prediction`) and which parameters went unused
(:mod:`~mmdet3d_ddp_guard.reporting.summary`), followed by what the simulation could not
settle (the seed it used) and the config advice in the words of the config's framework (its
row of :mod:`~mmdet3d_ddp_guard.environment.framework_table`): where the guard's setting is
the ``custom_imports`` line alone (mmcv 1.x), that line (:func:`import_line`); else that line,
the wrapper's line and the optional hook.
"""
from typing import Any, Mapping, Optional, Sequence

from ..environment.framework_table import framework as framework_row
from ..messages.ddp_outcome import HANGS
from ..reporting.summary import summary_text
from .ddp_prediction import prediction_text

#: Longer per-iteration tables go to a PNG in the work dir as well.
MAX_TABLE_ROWS = 20
#: Whose ``tools/train.py --seed`` defaults to the seed check simulates where the train
#: script sets the seed (mmcv 1.x's codebases).
SEED_SCRIPTS = 'BEVFormer, UniAD, StreamPETR and PETR (and in mmdet3d 0.17.1)'

#: The module the guard's import line adds to ``custom_imports``.
GUARD_MODULE = 'mmdet3d_ddp_guard'


def import_line(custom_imports: Optional[Mapping], key: str) -> str:
    """The ``custom_imports`` line that imports the guard, for the end of a config whose
    merged ``custom_imports`` is ``custom_imports``: its list with the guard added and its
    ``allow_failed_imports`` kept, since the line replaces the list the config has. ``key``:
    the config key of the framework's imports (its row's ``imports_key``).

    Args:
        custom_imports (Mapping): The config's ``custom_imports``, or None.
        key (str): Its key.
    """
    custom_imports = custom_imports or {}
    imports = custom_imports.get('imports') or []
    # mmcv's and MMEngine's import_modules_from_strings take one name as well as a list.
    imports = [imports] if isinstance(imports, str) else list(imports)
    if GUARD_MODULE not in imports:
        imports.append(GUARD_MODULE)
    allow = custom_imports.get('allow_failed_imports', False)
    return f'{key} = dict(imports={imports!r}, allow_failed_imports={allow!r})'


def train_script_seed_text(seed: int, config_seed: Any = None) -> str:
    """What the report says of the seed of a config simulated without ``--seed``, where the
    train scripts set the seed (mmcv 1.x's).

    Args:
        seed (int): The seed simulated (the BEV codebases' ``--seed`` default).
        config_seed: The ``seed`` the config writes, None where it writes none.
    """
    text = (f'No --seed given: simulated with seed {seed}, the --seed default of '
            f'tools/train.py in {SEED_SCRIPTS}, which set cfg.seed = args.seed.')
    if config_seed is not None:
        text += (f' The config\'s seed = {config_seed!r} is not what these train scripts '
                 'use: each overwrites cfg.seed with its --seed.')
    return text + (' mmdet 2.x\'s own tools/train.py (init_random_seed, as in 2.28) draws '
                   'a random seed when not given --seed, and a shuffling sampler orders the '
                   'data by it: give check the --seed your training gets.')


def report(summary: dict, prediction: dict, table, framework: str,
           custom_imports: Optional[Mapping] = None, config_seed: Any = None,
           notes: Sequence[str] = ()) -> str:
    """The text the command prints: the summary, the prediction and the config advice.

    Args:
        summary (dict): :func:`~mmdet3d_ddp_guard.reporting.summary.summary_dict`'s,
            as :func:`~mmdet3d_ddp_guard.cli.check.run_check` returns it.
        prediction (dict): :func:`~.ddp_prediction.predict`'s, as ``run_check`` returns it.
        table (ParamTable): The names of the parameter ids.
        framework (str): The config's framework (:func:`~.config_framework.config_framework`),
            whose row of the table says the words that differ.
        custom_imports (Mapping): The config's ``custom_imports`` (:func:`import_line`).
        config_seed: The ``seed`` the config writes, where the train script sets its own
            (:func:`train_script_seed_text`).
        notes (list[str]): More to say about how the config was read (the 1.x plugin).
    """
    row = framework_row(framework)
    lines = ['', '=' * 78, summary_text(summary), '',
             prediction_text(prediction, table, max_rows=MAX_TABLE_ROWS)]
    if not prediction['seed_from_config'] and row.seed_set_by_train_script:
        lines.append(train_script_seed_text(prediction['seed'], config_seed))
    elif not prediction['seed_from_config']:
        lines.append(f'The config sets no {row.seed_key}, so a shuffling sampler orders '
                     f'the data differently in every run; this prediction used seed '
                     f'{prediction["seed"]} (--seed sets one).')
    lines += list(notes)
    if prediction['plain_ddp']['outcome'] == HANGS:
        lines += ['', 'First replace the SyncBN-type layer(s) named above: no wrapper can '
                  'prevent that hang. Then, for the unused parameters, add to your config:']
    else:
        lines += ['', 'Add to your config:']
    lines.append(f'    {import_line(custom_imports, row.imports_key)}')
    if not row.guard_is_import_line:
        lines.append(f'    {summary["verdict"]["recommended_setting"]}')
    lines += list(row.setting_lines) + ['=' * 78]
    return '\n'.join(lines)
