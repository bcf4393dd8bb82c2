"""`check CONFIG --world-size N` on an mmcv-full 1.x (mmdet 2.x) config, against a real run.

The tiny branch RetinaNet (``branch_detector.py``) runs its ``refiner`` only on batches with
label 1, which the tiny data (``tiny_coco.py``) puts on the even images; with
``shuffle=False`` mmdet's ``InfiniteBatchSampler`` gives rank 0 of 2 the even images and
rank 1 the odd ones. Run in the OpenMMLab 1.x venv (where mmcv-full 1.x is not installed
only the adapter choice is tested)::

    PYTHONPATH=<repo> .venvs/openmmlab1/bin/python -m pytest -q \
        tests/openmmlab1/test_check_openmmlab1.py
"""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

from mmdet3d_ddp_guard.__main__ import main
from mmdet3d_ddp_guard.cli.check import (MMCV1, MMENGINE, config_file_keys, config_framework,
                                         framework_of_config, written_for)
from mmdet3d_ddp_guard.cli.launch import free_port, kill_process_tree
from mmdet3d_ddp_guard.core.frameworks import installed_frameworks
from tests.openmmlab1.tiny_coco import make_tiny_coco
from tests.timeouts import scaled

needs_mmcv1 = pytest.mark.skipif('mmcv-full' not in installed_frameworks(),
                                 reason='needs mmcv-full 1.x and mmdet 2.x (.venvs/openmmlab1)')
REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(REPO, 'tests/openmmlab1/configs/tiny_retinanet_branch.py')
PLAIN_CONFIG = osp.join(REPO,
                        'tests/openmmlab1/projects/configs/plugin_tiny_retinanet_branch_plain.py')
TRAIN = osp.join(REPO, 'tests/openmmlab1/projects/train.py')
ADVICE = "custom_imports = dict(imports=['mmdet3d_ddp_guard'], allow_failed_imports=False)"


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


def _check(tmp_path, capsys, *options):
    """Runs the check command in this process; returns (exit code, stdout, JSON prediction,
    summary JSON)."""
    prediction_path = str(tmp_path / 'prediction.json')
    code = main(['check', CONFIG, '--work-dir', str(tmp_path / 'work'), '--json',
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
    installed = installed_frameworks()
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
    # The 1.x advice: the one import line, not MMEngine's wrapper config.
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
    # A session of its own, so that a timeout can kill torchrun and its workers.
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=scaled(240))
    except subprocess.TimeoutExpired:
        kill_process_tree(process.pid)
        out, _ = process.communicate()
        pytest.fail(f'plain DDP hung instead of failing:\n{out[-3000:]}')
    assert process.returncode != 0, out[-3000:]
    assert 'Expected to have finished reduction' in out, out[-3000:]
    # DDP names the same parameters on the same rank as the prediction ...
    assert 'did not receive grad for rank 1: ' + ' '.join(map(str, predicted_ids)) in out, \
        out[-3000:]
    # ... after iteration 0: rank 1 ran its first forward (branch skipped) and no other.
    assert '[branch] rank=1 call=0 ran=0' in out
    assert '[branch] rank=1 call=1 ' not in out
    assert '[branch] rank=0 call=0 ran=1' in out
