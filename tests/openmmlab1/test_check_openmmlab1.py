"""`check CONFIG --world-size N` on an mmcv-full 1.x (mmdet 2.x) config, against a real run.

The tiny branch RetinaNet (``branch_detector.py``) runs its ``refiner`` only on batches with
label 1, which the tiny data (``tiny_coco.py``) puts on the even images; with
``shuffle=False`` mmdet's ``InfiniteBatchSampler`` gives rank 0 of 2 the even images and
rank 1 the odd ones. The codebase-shaped plugin's config with ``data.shuffler_sampler``
(``projects/configs/plugin_tiny_retinanet_branch_samplers.py``) is read through the plugin's
own ``build_dataloader`` and sampler (``projects/mmdet3d_plugin/datasets/``), which orders
the images by the seed. ``plugin_tiny_retinanet_branch_lean.py`` (a plugin without a builder
of its own, and ``seed = 5``) is read through mmdet 2.14's ``build_dataloader``
(``projects/mmdet_2_14_builder.py``, put in place of mmdet's). Run in the OpenMMLab 1.x venv
(where mmcv-full 1.x is not installed only the adapter choice and the import line are
tested)::

    PYTHONPATH=<repo> .venvs/openmmlab1/bin/python -m pytest -q \
        tests/openmmlab1/test_check_openmmlab1.py
"""
import json
import os
import os.path as osp
import re
import sys

import pytest

from mmdet3d_ddp_guard.__main__ import main
from mmdet3d_ddp_guard.cli.check import load_config
from mmdet3d_ddp_guard.rank_simulation.check_report import import_line
from mmdet3d_ddp_guard.rank_simulation.config_framework import (
    config_file_keys, config_framework, config_frameworks, framework_of_config, written_for)
from demo.launch import free_port
from mmdet3d_ddp_guard.environment.framework_table import MMCV1_LINES
from mmdet3d_ddp_guard.environment.frameworks import installed_frameworks
from mmdet3d_ddp_guard.environment.framework_table import MMCV1, MMENGINE, framework
from tests.openmmlab1.tiny_coco import make_tiny_coco
from tests.dist_utils import run_launcher

#: mmcv 1.x's key of the modules a training imports.
KEY = framework(MMCV1).imports_key

needs_mmcv1 = pytest.mark.skipif('mmcv-full' not in installed_frameworks(),
                                 reason='needs mmcv-full 1.x and mmdet 2.x (.venvs/openmmlab1)')
REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(REPO, 'tests/openmmlab1/configs/tiny_retinanet_branch.py')
PLAIN_CONFIG = osp.join(REPO,
                        'tests/openmmlab1/projects/configs/plugin_tiny_retinanet_branch_plain.py')
SAMPLERS_CONFIG = osp.join(
    REPO, 'tests/openmmlab1/projects/configs/plugin_tiny_retinanet_branch_samplers.py')
LEAN_CONFIG = osp.join(REPO,
                       'tests/openmmlab1/projects/configs/plugin_tiny_retinanet_branch_lean.py')
TRAIN = osp.join(REPO, 'tests/openmmlab1/projects/train.py')
PLUGIN = 'tests.openmmlab1.projects.mmdet3d_plugin'
# Both configs import the tiny detector: the advice keeps it in the list.
ADVICE = ("custom_imports = dict(imports=['tests.openmmlab1.branch_detector', "
          "'mmdet3d_ddp_guard'], allow_failed_imports=False)")


@pytest.fixture
def refiner_params():
    """The names of the refiner's parameters (imported here: the detector needs mmdet 2.x)."""
    from tests.openmmlab1.branch_detector import REFINER_PARAMS
    return list(REFINER_PARAMS)


@pytest.fixture(scope='module')
def coco_root(tmp_path_factory):
    """The tiny COCO data, written once (8 images; the even ones hold label 1)."""
    return make_tiny_coco(str(tmp_path_factory.mktemp('tiny_coco'))) + os.sep


@pytest.fixture
def coco_env(coco_root, monkeypatch):
    # The configs read the data root from the environment when they are loaded.
    monkeypatch.setenv('TINY_COCO_ROOT', coco_root)
    return coco_root


def _check(tmp_path, capsys, *options, config=CONFIG):
    """Runs the check command in this process; returns (exit code, stdout, JSON prediction,
    summary JSON)."""
    prediction_path = str(tmp_path / 'prediction.json')
    code = main(['check', config, '--work-dir', str(tmp_path / 'work'), '--json',
                 prediction_path, *options])
    out = capsys.readouterr().out
    with open(prediction_path) as f:
        prediction = json.load(f)
    with open(tmp_path / 'work' / 'unused_params_summary.json') as f:
        summary = json.load(f)
    return code, out, prediction, summary


@pytest.fixture
def mmengine_config(tmp_path):
    """An MMEngine config's top-level keys (the leg runs from a copy of tests/ alone)."""
    path = tmp_path / 'mmengine_style.py'
    path.write_text("model = dict(type='ToyDetector')\n"
                    "train_dataloader = dict(batch_size=2, dataset=dict(type='ToyDataset'))\n"
                    "optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1))\n"
                    'train_cfg = dict(by_epoch=False, max_iters=2)\n')
    return str(path)


def test_the_config_keys_say_which_framework_it_is_written_for(mmengine_config):
    # Read from the source, through the _base_ chain, without running either Config.
    keys = config_file_keys(PLAIN_CONFIG)
    assert keys['runner']['type'] == 'IterBasedRunner' and 'optimizer_config' in keys
    assert keys['ddp_guard'] == dict(enabled=False) and keys['plugin'] is True
    assert written_for(PLAIN_CONFIG) == written_for(CONFIG) == MMCV1
    assert written_for(mmengine_config) == MMENGINE
    # MMEngine's keys win over the 1.x ones; a config with neither says neither.
    assert framework_of_config(dict(optim_wrapper={}, optimizer_config={})) == MMENGINE
    assert framework_of_config(dict(train_cfg=dict(type='IterBasedTrainLoop'),
                                    optimizer_config={})) == MMENGINE
    assert framework_of_config(dict(runner=dict(type='EpochBasedRunner'))) == MMCV1
    assert framework_of_config(dict(data=dict(train={}))) == MMCV1
    assert framework_of_config(dict(model={})) is None


def test_the_installed_framework_simulates_and_a_foreign_config_is_bad_usage(
        mmengine_config, capsys):
    installed = config_frameworks()  # torch alone reads no config
    if len(installed) == 1:
        # Only the installed framework's Config can read its configs.
        assert config_framework(CONFIG) == config_framework(mmengine_config) == \
            next(iter(installed))
    else:
        assert (config_framework(CONFIG), config_framework(mmengine_config)) == \
            (MMCV1, MMENGINE)
    for framework, config in ((MMCV1, CONFIG), (MMENGINE, mmengine_config)):
        if framework not in installed:
            assert main(['check', config, '--world-size', '2']) == 2
            assert f'is written for {"mmcv-full 1.x" if framework == MMCV1 else "MMEngine"}' \
                in capsys.readouterr().out


@needs_mmcv1
@pytest.mark.timeout(120)
def test_two_ranks_fail_at_iteration_0_caused_by_rank_1(coco_env, refiner_params, tmp_path,
                                                        capsys):
    png = tmp_path / 'prediction.png'
    code, out, prediction, summary = _check(tmp_path, capsys, '--world-size', '2',
                                            '--png', str(png))
    assert code == 1
    assert 'plain DDP (find_unused_parameters=False) on 2 rank(s): fails at iteration 0, ' \
           'caused by rank(s) 1.' in out
    assert 'rank 1, iteration 0: 3 parameters unused' in out
    assert prediction['plain_ddp'] == dict(outcome='fails', first_iteration=0)
    first = prediction['per_iteration'][0]
    assert first['ranks'] == [1]
    assert first['unused_per_rank'] == [[], refiner_params]
    # Every iteration alike: rank 1 only ever reads odd images.
    assert all(line['unused_per_rank'] == first['unused_per_rank']
               for line in prediction['per_iteration'])
    assert prediction['static_graph']['outcome'] == 'ok'
    assert prediction['guarded_ddp']['outcome'] == 'ok'
    assert sorted(p['name'] for p in summary['parameters']) == sorted(refiner_params)
    assert png.stat().st_size > 0
    # The 1.x advice: the one import line, added to the config's list, not MMEngine's
    # wrapper config.
    assert f'Add to your config:\n    {ADVICE}\n' in out
    assert 'model_wrapper_cfg' not in out


@needs_mmcv1
@pytest.mark.timeout(120)
def test_one_rank_fails_where_its_batch_skips_the_branch(coco_env, tmp_path, capsys):
    # One rank reads images 0, 1, 2, ... in order: odd iterations skip the refiner.
    code, out, prediction, _ = _check(tmp_path, capsys, '--world-size', '1')
    assert code == 1
    assert prediction['plain_ddp'] == dict(outcome='fails', first_iteration=1)
    assert [line['outcome'] for line in prediction['per_iteration']] == \
        ['ok', 'fails', 'ok', 'fails']
    assert 'on 1 rank(s): fails at iteration 1, caused by rank(s) 0.' in out


@needs_mmcv1
@pytest.mark.timeout(120)
def test_ok_when_every_batch_holds_the_class(coco_env, tmp_path, capsys):
    # Batches of two consecutive images always hold an even one.
    code, out, prediction, _ = _check(tmp_path, capsys, '--world-size', '1',
                                      '--cfg-options', 'data.samples_per_gpu=2')
    assert code == 0
    assert prediction['plain_ddp'] == dict(outcome='ok', first_iteration=None)
    assert 'plain DDP (find_unused_parameters=False) on 1 rank(s): ok.' in out
    assert 'would not have failed' in out


@needs_mmcv1
@pytest.mark.timeout(120)
def test_epoch_based_runner_shards_as_distributed_sampler(coco_env, refiner_params, tmp_path,
                                                          capsys):
    # EpochBasedRunner without shuffle: mmdet's DistributedSampler, rank r reads r, r+2, ...
    code, _, prediction, _ = _check(tmp_path, capsys, '--world-size', '2', '--cfg-options',
                                    'runner.type=EpochBasedRunner', 'seed=0')
    assert code == 1
    assert prediction['plain_ddp'] == dict(outcome='fails', first_iteration=0)
    assert prediction['per_iteration'][0]['unused_per_rank'] == [[], refiner_params]


@needs_mmcv1
@pytest.mark.timeout(300)
def test_real_two_rank_plain_ddp_fails_where_predicted(coco_env, tmp_path, capsys):
    _, _, prediction, summary = _check(tmp_path, capsys, '--world-size', '2')
    assert prediction['plain_ddp'] == dict(outcome='fails', first_iteration=0)
    predicted_ids = sorted(p['id'] for p in summary['parameters'] if p['ranks'] == [1])

    env = dict(os.environ, PYTHONPATH=REPO, TINY_COCO_ROOT=coco_env, OMP_NUM_THREADS='1')
    command = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
               '--master_port', str(free_port()), TRAIN, PLAIN_CONFIG,
               '--work-dir', str(tmp_path / 'real'), '--launcher', 'pytorch']
    # Past its limit, a hang of plain DDP fails with every process's stacks (run_launcher).
    run = run_launcher(command, timeout=240, env=env, cwd=REPO)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert 'Expected to have finished reduction' in out, out[-3000:]
    # DDP names the same parameters on the same rank as the prediction ...
    assert 'did not receive grad for rank 1: ' + ' '.join(map(str, predicted_ids)) in out, \
        out[-3000:]
    # ... after iteration 0: rank 1 ran its first forward (branch skipped) and no other.
    assert '[branch] rank=1 call=0 ran=0' in out
    assert '[branch] rank=1 call=1 ' not in out
    assert '[branch] rank=0 call=0 ran=1' in out


def test_the_import_line_adds_the_guard_to_the_configs_own_list():
    assert import_line(None, KEY) == import_line({}, KEY) == MMCV1_LINES.guard
    assert import_line(dict(imports=['projects.mmdet3d_plugin']), KEY) == (
        "custom_imports = dict(imports=['projects.mmdet3d_plugin', 'mmdet3d_ddp_guard'], "
        'allow_failed_imports=False)')
    # One module name as a string, the user's allow_failed_imports, no second guard entry.
    assert import_line(dict(imports='a.b', allow_failed_imports=True), KEY) == (
        "custom_imports = dict(imports=['a.b', 'mmdet3d_ddp_guard'], "
        'allow_failed_imports=True)')
    assert import_line(dict(imports=['mmdet3d_ddp_guard', 'a.b']), KEY) == (
        "custom_imports = dict(imports=['mmdet3d_ddp_guard', 'a.b'], "
        'allow_failed_imports=False)')


@needs_mmcv1
def test_the_advised_line_pasted_at_the_end_keeps_the_configs_imports(tmp_path):
    pasted = tmp_path / 'pasted.py'
    pasted.write_text(f'_base_ = [{CONFIG!r}]\n'
                      f"{import_line(load_config(CONFIG, MMCV1).custom_imports, KEY)}\n")
    # What the bare line alone would do: replace the list, the detector's import lost.
    alone = tmp_path / 'alone.py'
    alone.write_text(f'_base_ = [{CONFIG!r}]\n{MMCV1_LINES.guard}\n')
    assert load_config(str(alone), MMCV1).custom_imports.imports == ['mmdet3d_ddp_guard']
    assert load_config(str(pasted), MMCV1).custom_imports == dict(
        imports=['tests.openmmlab1.branch_detector', 'mmdet3d_ddp_guard'],
        allow_failed_imports=False)


@needs_mmcv1
def test_the_plugins_own_build_dataloader_is_found_and_called_as_the_codebases_call_it():
    from mmcv import Config

    from mmdet3d_ddp_guard.openmmlab1.training_loaders import (codebase_build_dataloader,
                                                             codebase_loader_args)
    from mmdet3d_ddp_guard.rank_simulation.simulated_ranks import SimulationError
    build = codebase_build_dataloader(PLUGIN)
    assert build.__module__ == f'{PLUGIN}.datasets.builder'
    # No plugin, or a plugin package without datasets: mmdet's builder.
    assert codebase_build_dataloader(None) is None
    assert codebase_build_dataloader('tests.openmmlab1.projects') is None

    cfg = load_config(SAMPLERS_CONFIG, MMCV1)
    # BEVFormer's and UniAD's call: no shuffle, no runner_type, the sampler keys of cfg.data.
    assert codebase_loader_args(cfg, 7, build) == dict(
        samples_per_gpu=1, seed=7, shuffler_sampler=dict(type='DistributedGroupSampler'),
        nonshuffler_sampler=dict(type='DistributedSampler'))

    def streampetr_build_dataloader(dataset, samples_per_gpu, workers_per_gpu, num_gpus=1,
                                    dist=True, shuffle=True, seed=None, shuffler_sampler=None,
                                    nonshuffler_sampler=None,
                                    runner_type=dict(type='EpochBasedRunner'), **kwargs):
        """StreamPETR's signature: its train module passes runner_type=cfg.runner."""
    assert codebase_loader_args(cfg, 0, streampetr_build_dataloader)['runner_type'] == \
        dict(type='IterBasedRunner', max_iters=4)
    with pytest.raises(SimulationError, match='no data.samples_per_gpu'):
        codebase_loader_args(Config(dict(data=dict(train={}))), 0, build)


def _samples_per_rank(out, world_size):
    """The image indices each simulated rank trained on, in order, from the detector's
    ``[branch]`` lines (the simulation runs the ranks of an iteration in rank order)."""
    calls = [[int(name.split('.')[0]) for name in files.split(',')]
             for files in re.findall(r'^\[branch\] .* files=(\S+)$', out, re.M)]
    return [sum(calls[rank::world_size], []) for rank in range(world_size)]


def _sampler_order(sampler_class, dataset, seed, world_size=2):
    """Epoch 0 of ``sampler_class`` (batches of 1) for every rank."""
    return [list(sampler_class(dataset, samples_per_gpu=1, num_replicas=world_size,
                               rank=rank, seed=seed)) for rank in range(world_size)]


@pytest.fixture
def samplers_dataset(coco_env):
    """The samplers config's training dataset, and its per-rank orders under the plugin's
    DistributedGroupSampler (``plugin(seed)``) and mmdet's (``mmdet(seed)``)."""
    from mmdet.datasets import build_dataset
    from mmdet.datasets.samplers import DistributedGroupSampler as MMDetGroupSampler

    from tests.openmmlab1.projects.mmdet3d_plugin.datasets.samplers import \
        DistributedGroupSampler
    dataset = build_dataset(load_config(SAMPLERS_CONFIG, MMCV1).data.train)
    return (lambda seed: _sampler_order(DistributedGroupSampler, dataset, seed),
            lambda seed: _sampler_order(MMDetGroupSampler, dataset, seed))


@needs_mmcv1
@pytest.mark.timeout(120)
def test_the_codebases_builder_and_sampler_order_the_ranks_data_by_seed_0(
        samplers_dataset, tmp_path, capsys):
    plugin, mmdet = samplers_dataset
    # 4 iterations of batch 1 on 2 ranks: one epoch of the 8 images.
    code, out, prediction, _ = _check(tmp_path, capsys, '--world-size', '2',
                                      config=SAMPLERS_CONFIG)
    assert code == 1
    # The plugin's sampler with the codebases' --seed default; neither mmdet's group sampler
    # nor the unshuffled shards of the config's data.train_dataloader (mmdet's key).
    assert _samples_per_rank(out, 2) == plugin(0)
    assert plugin(0) != mmdet(0) and plugin(0) != [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert (prediction['seed'], prediction['seed_from_config']) == (0, False)
    assert 'simulated with seed 0, the --seed default of tools/train.py in BEVFormer' in out
    # The advice and the summary's setting keep the config's own custom_imports.
    assert f'Add to your config:\n    {ADVICE}\n' in out
    assert f'Setting that fits: {ADVICE}' in out


@needs_mmcv1
@pytest.mark.timeout(120)
def test_seed_orders_the_codebases_sampler_over_the_configs_seed(samplers_dataset, tmp_path,
                                                                 capsys):
    plugin, _ = samplers_dataset
    # Seed 3's order is neither the default's nor the config's seed 5's.
    assert plugin(3) != plugin(0) and plugin(3) != plugin(5)
    # As the codebases' tools/train.py: cfg.seed = args.seed, whatever the config says.
    code, out, prediction, _ = _check(tmp_path, capsys, '--world-size', '2', '--seed', '3',
                                      '--cfg-options', 'seed=5', config=SAMPLERS_CONFIG)
    assert _samples_per_rank(out, 2) == plugin(3)
    assert (prediction['seed'], prediction['seed_from_config']) == (3, True)
    assert 'simulated with seed' not in out


def test_a_seed_out_of_numpys_range_is_bad_usage(capsys):
    assert main(['check', CONFIG, '--seed', '-1']) == 2
    assert '--seed must be an integer from 0 to 2**32 - 1' in capsys.readouterr().out


@needs_mmcv1
def test_a_builder_gets_only_the_arguments_its_signature_names():
    from mmdet.datasets import build_dataloader as mmdet_2_28

    from mmdet3d_ddp_guard.openmmlab1.training_loaders import (codebase_loader_args,
                                                             loader_args, taken_args)
    from mmdet3d_ddp_guard.rank_simulation.simulated_ranks import SimulationError
    from tests.openmmlab1.projects.mmdet_2_14_builder import build_dataloader as mmdet_2_14
    cfg = load_config(SAMPLERS_CONFIG, MMCV1)
    common = dict(samples_per_gpu=1, workers_per_gpu=0, seed=0, shuffle=False)
    assert loader_args(cfg, 0, mmdet_2_28) == dict(common, runner_type='IterBasedRunner',
                                                   persistent_workers=False)
    # mmdet 2.14's hands its **kwargs to torch's DataLoader: neither key may reach it.
    assert loader_args(cfg, 0, mmdet_2_14) == common
    assert codebase_loader_args(cfg, 0, mmdet_2_14) == dict(samples_per_gpu=1, seed=0)
    # A runner type mmdet's loader cannot build for matters only where the builder takes it.
    cfg.merge_from_dict({'runner.type': 'CustomRunner'})
    assert loader_args(cfg, 0, mmdet_2_14) == common
    with pytest.raises(SimulationError, match="runner.type='CustomRunner'"):
        loader_args(cfg, 0, mmdet_2_28)

    def keyword_only(dataset, *, runner_type=None, **kwargs):
        """A keyword-only parameter is named; the catch-all is not."""
    assert taken_args(keyword_only, dict(runner_type='x', shuffler_sampler={})) == \
        dict(runner_type='x')


@needs_mmcv1
@pytest.mark.timeout(120)
def test_mmdet_2_14s_builder_on_a_bev_shaped_config_orders_the_data_by_seed_0(
        coco_env, monkeypatch, tmp_path, capsys):
    from mmdet.datasets import build_dataset
    from mmdet.datasets.samplers import DistributedGroupSampler

    from tests.openmmlab1.projects import mmdet_2_14_builder
    dataset = build_dataset(load_config(LEAN_CONFIG, MMCV1).data.train)
    # As under mmdet 2.14 itself, the argument it lacks reaches torch's DataLoader and fails.
    with pytest.raises(TypeError, match='runner_type'):
        mmdet_2_14_builder.build_dataloader(dataset, 1, 0, runner_type='IterBasedRunner')
    monkeypatch.setattr('mmdet.datasets.builder.build_dataloader',
                        mmdet_2_14_builder.build_dataloader)
    code, out, prediction, _ = _check(tmp_path, capsys, '--world-size', '2',
                                      config=LEAN_CONFIG)
    assert code in (0, 1)
    # 2.14's shuffling group sampler with seed 0, not with the config's seed = 5.
    order = lambda seed: _sampler_order(DistributedGroupSampler, dataset, seed)  # noqa: E731
    assert order(0) != order(5)
    assert _samples_per_rank(out, 2) == order(0)
    assert (prediction['seed'], prediction['seed_from_config']) == (0, False)
    assert 'No --seed given: simulated with seed 0, the --seed default of tools/train.py in ' \
           'BEVFormer, UniAD, StreamPETR and PETR' in out
    assert "The config's seed = 5 is not what these train scripts use: each overwrites " \
           'cfg.seed with its --seed.' in out
    assert "mmdet 2.x's own tools/train.py (init_random_seed, as in 2.28) draws a random " \
           'seed' in out


@needs_mmcv1
def test_the_plugin_module_is_the_one_the_bev_train_scripts_import():
    from mmcv import Config

    from mmdet3d_ddp_guard.openmmlab1.rank_simulation import plugin_module
    from mmdet3d_ddp_guard.rank_simulation.simulated_ranks import SimulationError

    def module(config_path='projects/configs/bevformer/bevformer_tiny.py', **keys):
        return plugin_module(Config(keys), config_path)

    assert module(plugin=True, plugin_dir='projects/mmdet3d_plugin/') == \
        ('projects.mmdet3d_plugin', None)
    # Their os.path.dirname drops the last folder of a plugin_dir without a trailing slash.
    name, note = module(plugin=True, plugin_dir='projects/mmdet3d_plugin')
    assert name == 'projects'
    assert "plugin_dir = 'projects/mmdet3d_plugin' has no trailing '/'" in note
    assert "import os.path.dirname of it, 'projects', not 'projects.mmdet3d_plugin'" in note
    assert "write plugin_dir = 'projects/mmdet3d_plugin/'" in note
    # Without plugin_dir, the folder of the config as given.
    assert module(plugin=True) == ('projects.configs.bevformer', None)
    assert module(plugin=False, plugin_dir='projects/mmdet3d_plugin/') == (None, None)
    assert module(plugin_dir='projects/mmdet3d_plugin/') == (None, None)
    # Paths the scripts turn into names that Python cannot import: theirs fail too.
    for path, keys in (('x.py', dict(plugin_dir='./projects/mmdet3d_plugin/')),
                       ('./projects/configs/x.py', {}), ('/abs/x.py', {}),
                       ('x.py', dict(plugin_dir='mmdet3d_plugin'))):
        with pytest.raises(SimulationError, match='which Python cannot import: the '
                                                  'training fails the same way'):
            module(path, plugin=True, **keys)


@pytest.fixture
def codebase_root(tmp_path, monkeypatch, coco_env):
    """A codebase's root in a temporary folder, the working directory: its
    ``projects/mmdet3d_plugin`` registers the tiny detector under a name of its own, which
    ``projects/configs/plugin.py`` trains."""
    root = tmp_path / 'codebase'
    plugin = root / 'projects' / 'mmdet3d_plugin'
    plugin.mkdir(parents=True)
    (plugin / '__init__.py').write_text(
        'from mmdet.models import DETECTORS\n'
        'from tests.openmmlab1.branch_detector import BranchRetinaNet\n'
        "DETECTORS.register_module(name='PluginBranchRetinaNet', module=BranchRetinaNet, "
        'force=True)\n')
    (root / 'projects' / 'configs').mkdir()
    (root / 'projects' / 'configs' / 'plugin.py').write_text(
        f"_base_ = [{CONFIG!r}]\nmodel = dict(type='PluginBranchRetinaNet')\n"
        "plugin = True\nplugin_dir = 'projects/mmdet3d_plugin/'\n")
    monkeypatch.setattr(sys, 'path', list(sys.path))
    monkeypatch.chdir(root)
    yield root
    # The next test's codebase has a projects package of its own, registered or not.
    from mmdet.models import DETECTORS
    DETECTORS._module_dict.pop('PluginBranchRetinaNet', None)
    for name in [name for name in sys.modules if name.split('.')[0] == 'projects']:
        del sys.modules[name]


@needs_mmcv1
@pytest.mark.timeout(120)
def test_plugin_dir_is_imported_from_the_codebases_root(codebase_root, tmp_path, capsys):
    code = main(['check', 'projects/configs/plugin.py', '--iters', '1', '--work-dir',
                 str(tmp_path / 'work')])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    assert 'plain DDP (find_unused_parameters=False) on 1 rank(s)' in out
    assert 'trailing' not in out


@needs_mmcv1
def test_a_plugin_dir_without_its_trailing_slash_is_named_with_the_fix(codebase_root, capsys):
    config = codebase_root / 'projects' / 'configs' / 'no_slash.py'
    config.write_text("_base_ = ['./plugin.py']\nplugin_dir = 'projects/mmdet3d_plugin'\n")
    # As the train scripts: projects imports, and the detector its plugin registers is missing.
    assert main(['check', str(config)]) == 2
    out = capsys.readouterr().out
    assert 'PluginBranchRetinaNet is not in the' in out
    assert "'projects', not 'projects.mmdet3d_plugin', and so did check. If " \
           "'projects.mmdet3d_plugin' is the plugin, write plugin_dir = " \
           "'projects/mmdet3d_plugin/'." in out


@needs_mmcv1
def test_a_plugin_that_does_not_import_is_named_with_the_fix(codebase_root, tmp_path,
                                                             monkeypatch, capsys):
    config = codebase_root / 'projects' / 'configs' / 'plugin.py'
    imported = codebase_root / 'projects' / 'configs' / 'imported.py'
    imported.write_text(
        "_base_ = ['./plugin.py']\ncustom_imports = dict(imports=["
        "'tests.openmmlab1.branch_detector', 'projects.mmdet3d_plugin'], "
        'allow_failed_imports=False)\n')
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    fix = ("no module 'projects' on the path. Run check from the codebase's root (the folder "
           'that holds projects/')
    assert main(['check', str(config)]) == 2
    assert f"cannot import 'projects.mmdet3d_plugin' (plugin_dir = " \
           f"'projects/mmdet3d_plugin/'): {fix}" in capsys.readouterr().out
    assert main(['check', str(imported)]) == 2
    assert f"cannot import 'projects.mmdet3d_plugin' (in the config's custom_imports): " \
           f'{fix}' in capsys.readouterr().out
