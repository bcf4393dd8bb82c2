"""The one table of the frameworks the guard adapts to, a row per framework.

A row says everything that differs between frameworks outside their adapter folders: how to
find the framework installed (the module Python would import, without importing it), the adapter package that serves it and
what the package exports from it, how to tell a config written for it, the config lines its
messages name (:class:`~mmdet3d_ddp_guard.messages.config_lines.ConfigLines`), where its
training takes the seed from, and the words that differ. Everything else (``check``,
``summarize``, the reports, the messages, the guard) dispatches through the rows and compares
no framework's name, so that adding a framework means an adapter folder and a row here
(``tests/test_layout.py`` counts the modules outside both that name a framework: none).
"""
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from ..messages.config_lines import ConfigLines

#: The frameworks' names, the keys of :func:`~.frameworks.installed_frameworks`. A plain
#: PyTorch loop is a framework too: torch alone, no config, the user's own loop.
MMENGINE, MMCV1, PYTORCH, LIGHTNING = 'mmengine', 'mmcv-full', 'torch', 'lightning'


@dataclass(frozen=True)
class Framework:
    """One framework's row.

    Attributes:
        name (str): Its key (:data:`MMENGINE`, :data:`MMCV1`).
        title (str): How a message names it.
        short_title (str): How a message names it among others (``under ...``).
        adapter (str): The package's subpackage that adapts the guard to it.
        exports (tuple[str]): What ``mmdet3d_ddp_guard`` re-exports from the adapter.
        lines (ConfigLines): The config lines its messages name.
        modules (tuple): ``(module, below)`` pairs, in order: the framework is installed
            when Python would import one of these top-level modules (whichever distribution
            put it there, or none), at a version below ``below`` (a ``(major, minor)``; None:
            any version), read from the module's own files (:mod:`.frameworks`).
        written_for (callable): ``written_for(cfg)``, whether a config's top-level keys
            are this framework's.
        runner_types (tuple[str]): The ``runner = dict(type=...)`` of its configs, if any.
        seed_key (str): The config key its training takes the seed from; ``check --seed``
            sets it.
        seed_set_by_train_script (bool): Its train scripts overwrite the config's seed with
            their own ``--seed`` (``check`` then says which seed it simulated).
        guard_is_import_line (bool): The guard's whole config setting is the
            ``custom_imports`` line (no wrapper line, no hook line).
        without_the_guard (str): How to train without the guard, in its words.
        minimum (tuple[int, int]): The oldest ``(major, minor)`` the guard supports.
        too_old (str): The refusal of an older one; ``{version}``, the installed one.
        to_install (str): What to install for it, where no framework is.
        reads_configs (bool): Its trainings are described by a config that ``check`` can
            simulate (a config-reading adapter module, ``rank_simulation``); False for a
            loop the user writes, which has none.
        without_a_config (str): What ``check`` says of a training of this framework, which
            has no config to read; empty where it reads configs.
        sync_norm_classes (tuple): ``(module, class)`` of its layers that run a collective in
            their training forward, besides torch's ``SyncBatchNorm`` (whatever is
            installed: a class is told by its module and name, not imported).
        sync_norm_cfg_types (tuple[str]): The ``norm_cfg`` types that build such a layer.
        imports_key (str): The config key that lists the modules a training imports
            (``check`` reads and writes it).
        seed_help (str): ``check --seed``'s help, in its words.
        setting_lines (tuple[str]): What ``check``'s report adds after the guard's setting
            lines, in its words.
        words (tuple[str]): Its class names and config keys that no code outside its adapter
            and this table may hold (``tests/test_layout.py`` looks for them in the strings
            of every other module; docstrings and comments are prose).
        imported_by_the_package (bool): ``import mmdet3d_ddp_guard`` imports its adapter
            where it is installed; False for a trainer the user imports the adapter of by
            name (importing the package loads no trainer).
    """
    name: str
    title: str
    short_title: str
    adapter: str
    exports: Tuple[str, ...]
    lines: ConfigLines
    modules: Tuple[Tuple[str, Optional[Tuple[int, int]]], ...]
    written_for: Callable[[Mapping[str, Any]], bool]
    runner_types: Tuple[str, ...]
    seed_key: str
    seed_set_by_train_script: bool
    guard_is_import_line: bool
    without_the_guard: str
    minimum: Tuple[int, int]
    too_old: str
    to_install: str
    reads_configs: bool = True
    without_a_config: str = ''
    sync_norm_classes: Tuple[Tuple[str, str], ...] = ()
    sync_norm_cfg_types: Tuple[str, ...] = ()
    imports_key: str = ''
    seed_help: str = ''
    setting_lines: Tuple[str, ...] = ()
    words: Tuple[str, ...] = ()
    imported_by_the_package: bool = True


def _written_for_mmengine(cfg: Mapping[str, Any]) -> bool:
    """MMEngine's keys: ``optim_wrapper``, ``train_dataloader``, ``default_scope``, or a
    ``train_cfg`` loop (mmcv 1.x reads none of them)."""
    if any(key in cfg for key in ('optim_wrapper', 'train_dataloader', 'default_scope')):
        return True
    train_cfg = cfg.get('train_cfg')
    return isinstance(train_cfg, Mapping) and (
        str(train_cfg.get('type', '')).endswith('TrainLoop')
        or 'max_epochs' in train_cfg or 'max_iters' in train_cfg)


#: mmcv 1.x's runners, named by ``runner = dict(type=...)`` in a 1.x config (and the
#: ``runner_type`` values whose data mmdet's ``build_dataloader`` builds).
_MMCV1_RUNNERS = ('IterBasedRunner', 'EpochBasedRunner')


def _written_for_mmcv1(cfg: Mapping[str, Any]) -> bool:
    """mmcv 1.x's keys: ``optimizer_config``, a ``runner`` of its types, or ``data.train``."""
    runner, data = cfg.get('runner'), cfg.get('data')
    return ('optimizer_config' in cfg
            or isinstance(runner, Mapping) and runner.get('type') in _MMCV1_RUNNERS
            or isinstance(data, Mapping) and 'train' in data)


#: The OpenMMLab frameworks' words for the stall guard's fix of a collective in a branch.
_CHECK_THE_BRANCH = ('run `python -m mmdet3d_ddp_guard check CONFIG --world-size N` to see which '
                     'batches take the branch')
_PLAIN_NORM_CFG = "norm_cfg=dict(type='BN')"
#: The words of the frameworks without a config (a loop, a trainer) for the same fix.
_LOG_THE_BRANCH = ('log which batches take the branch, on which rank (a plain loop has no '
                   'config for `check` to simulate)')
_PLAIN_NORM = 'nn.BatchNorm2d or nn.GroupNorm in place of the synchronised layer'
#: The fields of a framework whose trainings have no config (a loop, a trainer): no config is
#: written for it, no runner type, no seed key, and the guard is more than an import line.
_NO_CONFIG: Dict[str, Any] = dict(written_for=lambda cfg: False, runner_types=(), seed_key='',
                                  seed_set_by_train_script=False, guard_is_import_line=False,
                                  reads_configs=False)
#: ``norm_cfg`` types that build a layer with a collective in its forward, as mmcv and
#: mmdet3d register them ('SyncBN' is torch's SyncBatchNorm).
_SYNC_NORM_CFG_TYPES = ('SyncBN', 'MMSyncBN', 'naiveSyncBN1d', 'naiveSyncBN2d')


# In order: a config whose keys are MMEngine's is MMEngine's (its keys win), and MMEngine is
# the framework ``check`` reads a config with where the keys say neither.
FRAMEWORKS: Tuple[Framework, ...] = (
    Framework(
        name=MMENGINE,
        title='MMEngine (OpenMMLab 2.x)',
        short_title='MMEngine',
        adapter='openmmlab2',
        exports=('GuardedDDP', 'UnusedParamsHook', 'StallPhaseHook', 'CPUCompatibleMMDDP'),
        lines=ConfigLines(
            report='UnusedParamsHook',
            wrapper='GuardedDDP',
            guard="model_wrapper_cfg = dict(type='GuardedDDP')",
            mode_template=("model_wrapper_cfg = dict(type='GuardedDDP', "
                           'find_unused_parameters={value})'),
            # GuardedDDP refuses a top-level value that disagrees with model_wrapper_cfg's.
            mode_over_false='and delete any top-level `find_unused_parameters = False`',
            option_template="model_wrapper_cfg = dict(type='GuardedDDP', {option}={value})",
            static_graph_fix=("remove static_graph=True from model_wrapper_cfg and let "
                              "GuardedDDP choose: model_wrapper_cfg = dict(type='GuardedDDP')"),
            let_the_guard_choose="Remove it (or write 'auto') to let GuardedDDP choose.",
            own_wrapper="MMEngine's MMDistributedDataParallel",
            where='in your config',
            find_the_branch=_CHECK_THE_BRANCH,
            plain_norm=_PLAIN_NORM_CFG,
            runner_option='model_wrapper_cfg',
            accumulation_option='accumulative_counts'),
        # mmengine, mmengine-lite and onedl-mmengine all install the module mmengine.
        modules=(('mmengine', None), ),
        written_for=_written_for_mmengine,
        runner_types=(),
        seed_key='randomness.seed',
        seed_set_by_train_script=False,
        guard_is_import_line=False,
        without_the_guard=("remove mmdet3d_ddp_guard from custom_imports and "
                           "`model_wrapper_cfg = dict(type='GuardedDDP')` (or the _base_ file "
                           'that holds it) from your config, and set find_unused_parameters = '
                           'True in it instead'),
        # mmdet3d 1.4 accepts mmengine >= 0.8.0; tested on 0.8.0 and 0.10.7.
        minimum=(0, 8),
        too_old=('mmdet3d_ddp_guard needs mmengine >= 0.8 (as mmdet3d 1.4 does), but mmengine '
                 "{version} is installed: pip install -U 'mmengine>=0.8'."),
        to_install="MMEngine (mmdet3d >= 1.1: pip install 'mmengine>=0.8')",
        sync_norm_classes=(
            ('mmcv.ops.sync_bn', 'SyncBatchNorm'),  # mmcv's 'MMSyncBN'
            ('mmdet3d.models.layers.norm', 'NaiveSyncBatchNorm1d'),  # 'naiveSyncBN1d'
            ('mmdet3d.models.layers.norm', 'NaiveSyncBatchNorm2d'),  # 'naiveSyncBN2d'
        ),
        sync_norm_cfg_types=_SYNC_NORM_CFG_TYPES,
        imports_key='custom_imports',
        seed_help=("MMEngine: set as randomness.seed; default the config's, else a random one, "
                   'as its Runner draws'),
        setting_lines=("    custom_hooks = [dict(type='UnusedParamsHook')]  # optional: "
                       'per-iteration report',
                       '(or inherit configs/_base_/ddp_guard.py), and delete any top-level '
                       '`find_unused_parameters = ...` line.'),
        words=('FlexibleRunner', 'OptimWrapper', 'AmpOptimWrapper', 'MessageHub', 'print_log',
               'NaiveSyncBatchNorm1d', 'NaiveSyncBatchNorm2d', 'model_wrapper_cfg',
               'custom_imports', 'custom_hooks', 'norm_cfg', 'randomness', 'optim_wrapper',
               'train_dataloader', 'default_scope', 'accumulative_counts')
        + _SYNC_NORM_CFG_TYPES[1:]),
    # The training scripts pass cfg.get('find_unused_parameters', False) to mmcv's DDP, and
    # the guard reads the same key: a line at the end of the config also overrides an
    # inherited one.
    Framework(
        name=MMCV1,
        title='mmcv-full 1.x (OpenMMLab 1.x: mmdet 2.x, mmdet3d 0.x)',
        short_title='mmcv-full 1.x',
        adapter='openmmlab1',
        exports=('GuardedMMDistributedDataParallel', ),
        lines=ConfigLines(
            report='UnusedParamsHook',
            wrapper='MMDistributedDataParallel (guarded by mmdet3d_ddp_guard)',
            guard=("custom_imports = dict(imports=['mmdet3d_ddp_guard'], "
                   'allow_failed_imports=False)'),
            mode_template='find_unused_parameters = {value}',
            mode_over_false=('in place of `find_unused_parameters = False` (written in your '
                             'config, it also overrides the False of a _base_ config)'),
            option_template='ddp_guard = dict({option}={value})',
            static_graph_fix=('remove static_graph=True (or _set_static_graph()) from the '
                              "training script's MMDistributedDataParallel(...) and let the "
                              'guard choose (the custom_imports line is all it needs)'),
            # The script passed True itself: what the config writes wins over it.
            let_the_guard_choose=("To let the guard choose, add this line to your config: "
                                  "find_unused_parameters='auto'."),
            own_wrapper="mmcv's MMDistributedDataParallel",
            where='in your config',
            find_the_branch=_CHECK_THE_BRANCH,
            plain_norm=_PLAIN_NORM_CFG),
        # mmcv-full and its lite build mmcv 1.x install the module mmcv; from 2.0 it is
        # MMEngine's.
        modules=(('mmcv', (2, 0)), ),
        written_for=_written_for_mmcv1,
        runner_types=_MMCV1_RUNNERS,
        seed_key='seed',
        seed_set_by_train_script=True,
        guard_is_import_line=True,
        without_the_guard=('remove mmdet3d_ddp_guard from custom_imports and set '
                           'find_unused_parameters = True in your config instead'),
        # BEVFormer, MapTR, PETR and bevfusion pin mmcv-full 1.4.0; tested on 1.7.2.
        minimum=(1, 4),
        too_old=('mmdet3d_ddp_guard supports mmcv-full >= 1.4 (tested on 1.7.2), but mmcv-full '
                 '{version} is installed. Upgrade it within 1.x as your codebase allows (e.g. '
                 "pip install 'mmcv-full==1.4.0', as BEVFormer pins), or remove "
                 'mmdet3d_ddp_guard from custom_imports and set find_unused_parameters = True '
                 'in your config instead.'),
        to_install=("mmcv-full 1.x for mmdet 2.x / mmdet3d 0.x (see mmcv's install guide: it "
                    'is compiled for your torch and CUDA)'),
        sync_norm_classes=(
            ('mmcv.ops.sync_bn', 'SyncBatchNorm'),
            ('mmdet3d.ops.norm', 'NaiveSyncBatchNorm1d'),  # mmdet3d 0.x and 1.0.0rc
            ('mmdet3d.ops.norm', 'NaiveSyncBatchNorm2d'),
        ),
        sync_norm_cfg_types=_SYNC_NORM_CFG_TYPES,
        imports_key='custom_imports',
        seed_help=("mmcv-full 1.x: the --seed of its tools/train.py, set as cfg.seed over the "
                   "config's own seed as those scripts set it; default 0, the --seed default of "
                   "the BEV codebases' tools/train.py (BEVFormer, UniAD, StreamPETR, PETR; "
                   "mmdet 2.x's draws a random one)"),
        setting_lines=('(it guards every MMDistributedDataParallel the training builds), and '
                       'delete any top-level `find_unused_parameters = ...` line.', ),
        words=('MMDistributedDataParallel', 'IterBasedRunner', 'EpochBasedRunner',
               'OptimizerHook', 'GradientCumulativeOptimizerHook', 'optimizer_config',
               'ddp_guard', 'custom_imports', 'norm_cfg')),
    # torch alone: the user builds the wrapper in their own loop. Its GuardedDDP is not
    # re-exported (mmdet3d_ddp_guard.GuardedDDP is MMEngine's): the import names the folder.
    # Last, so that a config (check) and a work dir (summarize) are read by an OpenMMLab
    # framework where one is installed.
    Framework(
        name=PYTORCH,
        title="plain PyTorch (your own loop around torch's DistributedDataParallel)",
        short_title='plain PyTorch',
        adapter='pytorch',
        exports=(),
        lines=ConfigLines(
            report='UnusedParamsReport',
            wrapper='GuardedDDP',
            guard='from mmdet3d_ddp_guard.pytorch import GuardedDDP; model = GuardedDDP(model)',
            mode_template='GuardedDDP(model, find_unused_parameters={value})',
            mode_over_false='in place of find_unused_parameters=False in GuardedDDP(...)',
            option_template='GuardedDDP(model, {option}={value})',
            static_graph_fix=('remove static_graph=True from GuardedDDP(...) and let it '
                              'choose: GuardedDDP(model)'),
            let_the_guard_choose=("Remove it (or pass 'auto') to let GuardedDDP choose."),
            own_wrapper="torch's DistributedDataParallel",
            where='in your code',
            find_the_branch=_LOG_THE_BRANCH,
            plain_norm=_PLAIN_NORM),
        modules=(('torch', None), ),
        without_the_guard=("build torch's DistributedDataParallel(model, "
                           'find_unused_parameters=True) in place of GuardedDDP(model)'),
        # The torch floor is check_torch's (environment/versions.py), for every framework.
        minimum=(1, 9),
        too_old='mmdet3d_ddp_guard needs torch >= 1.9, but torch {version} is installed.',
        to_install='torch (a plain PyTorch loop: mmdet3d_ddp_guard.pytorch.GuardedDDP)',
        **_NO_CONFIG,
        without_a_config=(
            'A plain PyTorch loop has no config for `check` to simulate. Train it under '
            'mmdet3d_ddp_guard.pytorch.GuardedDDP, which trains on where plain DDP would fail '
            'or hang, and read which parameters each rank left unused, and when, in its '
            'report (UnusedParamsReport(model, out_dir)) or with `python -m '
            'mmdet3d_ddp_guard summarize OUT_DIR`.')),
    # PyTorch Lightning builds torch's DDP in its DDPStrategy; the user passes the adapter's
    # strategy to its Trainer. The adapter is imported by name only: the package's import
    # must not load a trainer (seconds of import, and its logging set up).
    Framework(
        name=LIGHTNING,
        title="PyTorch Lightning (its Trainer builds torch's DistributedDataParallel)",
        short_title='Lightning',
        adapter='lightning',
        exports=(),
        lines=ConfigLines(
            report='GuardedDDPStrategy',
            wrapper='GuardedDDPStrategy',
            guard=('from mmdet3d_ddp_guard.lightning import GuardedDDPStrategy; '
                   'Trainer(strategy=GuardedDDPStrategy())'),
            mode_template='GuardedDDPStrategy(find_unused_parameters={value})',
            mode_over_false='in place of find_unused_parameters=False in GuardedDDPStrategy(...)',
            option_template='GuardedDDPStrategy({option}={value})',
            static_graph_fix=('remove static_graph=True from GuardedDDPStrategy(...) and let it '
                              'choose: GuardedDDPStrategy()'),
            let_the_guard_choose="Remove it (or pass 'auto') to let GuardedDDPStrategy choose.",
            own_wrapper="Lightning's DDPStrategy",
            where='in your code',
            find_the_branch=_LOG_THE_BRANCH,
            plain_norm=_PLAIN_NORM),
        # The unified package first: its lightning.pytorch is the same code.
        modules=(('lightning', None), ('pytorch_lightning', None)),
        without_the_guard=('pass Trainer(strategy=DDPStrategy(find_unused_parameters=True)) '
                           'in place of GuardedDDPStrategy()'),
        # DDPStrategy's _setup_model and pre_backward, which the adapter overrides, are 2.x's;
        # tested on 2.6.6.
        minimum=(2, 0),
        too_old=('mmdet3d_ddp_guard.lightning supports Lightning >= 2.0 (tested on 2.6.6), but '
                 "Lightning {version} is installed: pip install -U 'lightning>=2.0', or pass "
                 'Trainer(strategy=DDPStrategy(find_unused_parameters=True)) instead.'),
        to_install="PyTorch Lightning (pip install 'lightning>=2.0')",
        **_NO_CONFIG,
        without_a_config=(
            'A Lightning training has no config for `check` to simulate. Train it with '
            'Trainer(strategy=GuardedDDPStrategy()) (mmdet3d_ddp_guard.lightning), which '
            'trains on where DDPStrategy() would fail or hang and logs which parameters each '
            "rank left unused, and when, on Lightning's logger."),
        words=('LightningModule', 'DDPStrategy', 'training_step', 'manual_backward',
               'automatic_optimization', 'accumulate_grad_batches'),
        imported_by_the_package=False),
)

_BY_NAME: Dict[str, Framework] = {row.name: row for row in FRAMEWORKS}


def framework(name: str) -> Framework:
    """The row of the framework named ``name``."""
    return _BY_NAME[name]


def rows_of(names: Sequence[str]) -> Tuple[Framework, ...]:
    """The rows of ``names``, in the table's order."""
    return tuple(row for row in FRAMEWORKS if row.name in names)


#: Each adapter's config lines, which its messages name.
MMENGINE_LINES, MMCV1_LINES = framework(MMENGINE).lines, framework(MMCV1).lines
PYTORCH_LINES, LIGHTNING_LINES = framework(PYTORCH).lines, framework(LIGHTNING).lines
