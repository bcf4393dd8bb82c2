"""A handful of rows of the mmdet3d zoo run (``benchmarks/zoo.py``), shrunk hard, that
together read every tiny dataset format (KITTI, nuScenes with cameras, Lyft, Waymo,
SUN RGB-D) and every kind of model (LiDAR, monocular, multi-view, 2D image stage).

Each row goes through the zoo's own code: mmdet3d's installed config, pointed at the tiny
data and shrunk by ``zoo_overrides``, then ``check`` in a subprocess. The first row (SMOKE,
whose unused parameters make plain DDP fail) is simulated on 2 ranks and trained for real on
2 ranks under GuardedDDP under torchrun; the others, there to read each format and build
each kind of model, are simulated on 1 rank, which halves their cost. The full run (8 ranks,
2 iterations, every config) is a benchmark, not a test: see docs/zoo/README.md.
"""
import json
import os.path as osp
import sys

import pytest


sys.path.insert(0, osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'benchmarks'))
pytest.importorskip('mmdet3d')

import zoo  # noqa: E402
import zoo_overrides  # noqa: E402

SMOKE_UNUSED = {'backbone.level3.project.0.weight', 'backbone.level3.project.1.weight',
                'backbone.level3.project.1.bias', 'backbone.level4.project.0.weight',
                'backbone.level4.project.1.weight', 'backbone.level4.project.1.bias'}


@pytest.fixture(scope='module')
def zoo_data(tmp_path_factory):
    return str(tmp_path_factory.mktemp('zoo_data'))


def _row(config, tmp_path, zoo_data, *options):
    code = zoo.main(['--only', f'^{config}$', '--out', str(tmp_path / 'out'),
                     '--data-root', zoo_data, '--work-root', str(tmp_path / 'work'),
                     *options])
    assert code == 0
    with open(tmp_path / 'out' / 'zoo.json') as f:
        rows = {row['config']: row for row in json.load(f)}
    return rows[config]


def _checked(row):
    """A row that was built and simulated (training not asked for)."""
    assert row['built'] is True, row.get('error')
    assert row['status'] == 'pending', row.get('error')
    assert row['plain_ddp_8'] in ('ok', 'fails', 'hangs')
    return row


@pytest.mark.timeout(150)
def test_mono_kitti_row_smoke_needs_find_unused_and_trains(tmp_path, zoo_data):
    """SMOKE sets find_unused_parameters = True and needs it: 6 DLA-34 parameters are
    unused on every rank in every iteration. GuardedDDP ('auto') trains it on 2 real ranks.
    (KITTI's LiDAR side is trained by tests/test_mmdet3d_kitti.py.)"""
    row = _row('smoke/smoke_dla34_dlaneck_gn-all_4xb8-6x_kitti-mono3d.py', tmp_path, zoo_data,
               '--world-size', '2', '--iters', '1', '--train-iters', '1',
               '--image-factor', '0.25')
    assert row['status'] == 'ok', row.get('error')
    assert row['sets_find_unused'] is True and row['needs_find_unused'] is True
    assert row['plain_ddp_8'] == 'fails'
    assert set(row['unused']) == SMOKE_UNUSED
    assert set(row['unused'].values()) == {1.0}
    assert row['guarded_ddp_trained'] is True and row['guarded_ddp_decision']
    assert row['unused_in_training'] == len(SMOKE_UNUSED)
    assert row['seconds_per_step'] > 0


@pytest.mark.timeout(90)
@pytest.mark.parametrize('config', [
    # nuScenes with sweeps, through CBGSDataset: it needs boxes of every class.
    'centerpoint/centerpoint_pillar02_second_secfpn_8xb4-cyclic-20e_nus-3d.py',
    'pointpillars/pointpillars_hv_secfpn_sbn-all_8xb2-2x_lyft-3d.py',
    'pointpillars/pointpillars_hv_secfpn_sbn-all_16xb2-2x_waymoD5-3d-3class.py',
], ids=['nuscenes', 'lyft', 'waymo'])
def test_lidar_row(config, tmp_path, zoo_data):
    row = _checked(_row(config, tmp_path, zoo_data, '--no-train', '--world-size', '1',
                        '--iters', '1'))
    assert row['plain_ddp_8'] == 'ok' and row['unused'] == {}, row


@pytest.mark.parametrize('config, image_factor', [
    pytest.param('fcos3d/fcos3d_r101-caffe-dcn_fpn_head-gn_8xb2-1x_nus-mono3d.py', '0.1',
                 marks=pytest.mark.timeout(120), id='mono_nuscenes'),
    pytest.param('imvotenet/imvotenet_faster-rcnn-r50_fpn_4xb2_sunrgbd-3d.py', '0.25',
                 marks=pytest.mark.timeout(90), id='image_stage_sunrgbd'),
])
def test_image_row(config, image_factor, tmp_path, zoo_data):
    _checked(_row(config, tmp_path, zoo_data, '--no-train', '--world-size', '1', '--iters',
                  '1', '--image-factor', image_factor))


@pytest.mark.timeout(150)
def test_multiview_waymo_row(tmp_path, zoo_data):
    """MV-FCOS3D reads five Waymo cameras per sample; mmdet3d sets find_unused_parameters
    (only 1 of 4 FPN outputs is used)."""
    row = _checked(_row('mvfcos3d/multiview-fcos3d_r101-dcn_8xb2_waymoD5-3d-3class.py',
                        tmp_path, zoo_data, '--no-train', '--world-size', '1', '--iters',
                        '1', '--image-factor', '0.1'))
    assert row['sets_find_unused'] is True


@pytest.mark.timeout(60)
def test_classification_without_running(tmp_path, zoo_data):
    """Sparse convolution, DynamicScatter, the PointNet++ ops and AMP are skipped with their
    reason; configs mmdet3d 1.4.0 cannot train (nuImages' 2.x format, a 0.x pipeline step, a
    train pipeline that packs no labels) are a limitation, with it."""
    expected = {
        'second/second_hv_secfpn_8xb6-80e_kitti-3d-car.py': ('skipped', 'SparseEncoder'),
        'dynamic_voxelization/pointpillars_dv_secfpn_8xb6-160e_kitti-3d-car.py':
            ('skipped', 'DynamicScatter'),
        'votenet/votenet_8xb8_scannet-3d.py': ('skipped', 'PointNet2SASSG'),
        'pointpillars/pointpillars_hv_fpn_sbn-all_8xb2-amp-2x_nus-3d.py':
            ('skipped', 'AmpOptimWrapper'),
        'nuimages/mask-rcnn_r50_fpn_1x_nuim.py': ('limitation', 'MMDetection 2.x'),
        '_base_/models/pgd.py': ('skipped', '_base_ fragment'),
        'free_anchor/pointpillars_hv_regnet-3.2gf_fpn_head-free-anchor_sbn-all_8xb4-strong-'
        'aug-3x_nus-3d.py': ('limitation', "'Collect3D', which mmdet3d 1.x no longer"),
        'pointpillars/pointpillars_hv_secfpn_sbn-all_16xb2-2x_waymoD5-3d-car.py':
            ('limitation', "keeps only ['points']: no gt_labels_3d"),
    }
    code = zoo.main(['--classify', '--out', str(tmp_path), '--only',
                     '^(' + '|'.join(expected) + ')$'])
    assert code == 0
    with open(tmp_path / 'zoo.json') as f:
        rows = {row['config']: row for row in json.load(f)}
    for config, (status, words) in expected.items():
        assert rows[config]['status'] == status, rows[config]
        assert words in rows[config]['reason'], rows[config]
    assert zoo_overrides.TINY_DATASETS['WaymoDataset'] == 'waymo'


@pytest.mark.timeout(120)
def test_a_failed_training_keeps_the_workers_error_not_torchruns_summary(tmp_path):
    """A row whose 2-rank training fails records what the workers printed (here mmdet3d's
    train.py on a config that is not there), not torchrun's ChildFailedError report, which
    names the rank but not the error."""
    missing = str(tmp_path / 'no_such_config.py')
    train = zoo.run_training(missing, str(tmp_path / 'work'), 2, 1, timeout=100)
    assert train['trained'] is False and not train['timed_out']
    assert 'ChildFailedError' in train['output']
    error = zoo._workers_error(train['output'])
    assert 'no_such_config.py' in error and 'FileNotFoundError' in error, error
    assert 'ChildFailedError' not in error and 'elastic' not in error, error
