"""Two of MMDetection3D's own KITTI models, trained with its own tools/train.py under
torchrun on 2 CPU ranks, on the tiny synthetic KITTI data of ``examples.tiny_kitti``.

PointPillars uses every parameter; SMOKE, which mmdet3d marks
``find_unused_parameters = True``, leaves 6 unused in every iteration: plain DDP dies on
it, GuardedDDP trains it.
"""
import os.path as osp

import numpy as np
import pytest

pytest.importorskip('mmdet3d')

from mmdet3d_ddp_guard.cli.demo import REPO_CONFIGS, plain_ddp_options  # noqa: E402
from mmdet3d_ddp_guard.cli.launch import torchrun_train  # noqa: E402
from tests.timeouts import scaled  # noqa: E402

POINTPILLARS = osp.join(REPO_CONFIGS, 'pointpillars',
                        'pointpillars_hv_secfpn_tiny-kitti-3d-3class.py')
SMOKE = osp.join(REPO_CONFIGS, 'smoke', 'smoke_dla34_dlaneck_gn-all_tiny-kitti-mono3d.py')
SMOKE_UNUSED = ('backbone.level3.project.0.weight', 'backbone.level3.project.1.weight',
                'backbone.level3.project.1.bias', 'backbone.level4.project.0.weight',
                'backbone.level4.project.1.weight', 'backbone.level4.project.1.bias')


def _train(config, data_root_key, kitti_root, work_dir, *options):
    return torchrun_train(config, str(work_dir), timeout=scaled(240),
                          cfg_options=[f'{data_root_key}={kitti_root}', *options])


def _train_pointpillars(kitti_root, work_dir, *options):
    return _train(POINTPILLARS, 'train_dataloader.dataset.dataset.data_root', kitti_root,
                  work_dir, *options)


def _train_smoke(kitti_root, work_dir, *options):
    return _train(SMOKE, 'train_dataloader.dataset.data_root', kitti_root, work_dir,
                  *options)


@pytest.mark.timeout(120)
def test_tiny_kitti_loads_in_mmdet3d_kitti_dataset(kitti_root):
    """The boxes come back in LiDAR coordinates inside the point cloud range, with points."""
    from mmengine import Config
    from mmengine.registry import init_default_scope

    from mmdet3d.registry import DATASETS
    init_default_scope('mmdet3d')
    cfg = Config.fromfile(POINTPILLARS).train_dataloader.dataset.dataset
    dataset = DATASETS.build(dict(cfg, data_root=kitti_root, pipeline=[]))
    assert len(dataset) == 8
    for index in range(len(dataset)):
        info = dataset.get_data_info(index)
        boxes = info['ann_info']['gt_bboxes_3d']
        assert sorted(info['ann_info']['gt_labels_3d'].tolist()) == [0, 1, 2, 2]
        assert boxes.in_range_bev([0, -39.68, 69.12, 39.68]).all()
        assert np.allclose(boxes.bottom_height.numpy(), -1.73, atol=1e-3)
        assert all(instance['num_lidar_pts'] >= 60 for instance in info['instances'])
        assert len(info['cam_instances']['CAM2']) == 4


@pytest.mark.timeout(300)
def test_pointpillars_trains_under_guarded_ddp(kitti_root, tmp_path):
    run = _train_pointpillars(kitti_root, tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert "mode='complete' (requested find_unused_parameters='auto', from default)" \
        in run.output
    assert 'Iter(train) [4/4]' in run.output
    assert 'unused_params: 0' in run.output
    assert '0 of 66 parameters were unused at least once' in run.output


@pytest.mark.timeout(300)
def test_smoke_trains_under_guarded_ddp(kitti_root, tmp_path):
    run = _train_smoke(kitti_root, tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    # mmdet3d's `find_unused_parameters = True` is overridden by the config's own
    # `find_unused_parameters = 'auto'`: GuardedDDP chooses.
    assert ("mode='complete' (requested find_unused_parameters='auto', from config "
            'top-level find_unused_parameters)') in run.output
    assert 'Iter(train) [4/4]' in run.output
    assert 'unused_params: 6' in run.output
    summary = (tmp_path / 'unused_params_summary.txt').read_text()
    assert '6 of 233 parameters were unused at least once' in summary
    assert all(name in summary for name in SMOKE_UNUSED)


@pytest.mark.timeout(300)
def test_smoke_kills_plain_ddp_with_the_real_error(kitti_root, tmp_path):
    run = _train_smoke(kitti_root, tmp_path, *plain_ddp_options())
    assert run.returncode != 0 and not run.timed_out
    assert 'Expected to have finished reduction in the prior iteration' in run.output
    assert 'Iter(train) [2/4]' not in run.output
