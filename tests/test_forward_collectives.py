"""SyncBN-type layers: found by class, named at GuardedDDP's build, traced to their config
key."""
import pytest
import torch.nn as nn
from mmengine.logging import MMLogger

from mmdet3d_ddp_guard import GuardedDDP
from mmdet3d_ddp_guard.guard.forward_collectives import forward_collective_modules
from mmdet3d_ddp_guard.rank_simulation.forward_collective_counts import (config_key_of,
                                                                         sync_norm_cfg_keys)

pytest.importorskip('mmcv')
from tests.toys.gated_refiner_toy import ToyGatedRefinerDetector  # noqa: E402


def test_guarded_ddp_names_sync_batchnorm_layers_at_build(single_rank_group, tmp_path):
    # The newest logger is the 'current' one GuardedDDP logs to.
    log_file = tmp_path / 'build.log'
    MMLogger.get_instance(f'build_warning_{tmp_path.name}', log_file=str(log_file))
    model = ToyGatedRefinerDetector(refiner_norm_cfg=dict(type='SyncBN'))
    try:
        GuardedDDP(model)
    except ValueError as error:  # DDP refuses torch's SyncBatchNorm in a CPU module
        assert 'SyncBatchNorm layers only work with GPU modules' in str(error)
    out = log_file.read_text()
    assert 'holds 1 layer(s) that run a collective in their forward: refiner.1 ' \
        '(SyncBatchNorm)' in out


def test_mmdet3d_naive_sync_bn_counts_and_plain_bn_does_not():
    pytest.importorskip('mmdet3d')
    from mmdet3d.models.layers.norm import NaiveSyncBatchNorm1d
    model = nn.Sequential(nn.BatchNorm1d(4), NaiveSyncBatchNorm1d(4), nn.GroupNorm(2, 4))
    assert [name for name, _ in forward_collective_modules(model)] == ['1']


def test_the_config_key_of_a_layer():
    model_cfg = dict(type='X', backbone=dict(norm_cfg=dict(type='BN')),
                     pts_bbox_head=dict(norm_cfg=dict(type='mmdet3d.naiveSyncBN2d')),
                     neck=dict(blocks=[dict(norm_cfg=dict(type='SyncBN'))]))
    keys = sync_norm_cfg_keys(model_cfg)
    assert keys == ['model.pts_bbox_head.norm_cfg', 'model.neck.blocks.0.norm_cfg']
    assert config_key_of('pts_bbox_head.shared_conv.bn', keys) == keys[0]
    assert config_key_of('neck.blocks.0.bn', keys) == keys[1]
    assert config_key_of('refiner.1', keys) is None
