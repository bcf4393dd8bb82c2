"""mmdet3d's own CenterPoint with a custom layer that runs only for batches with a
pedestrian, trained for 4 iterations on tiny synthetic nuScenes data through mmdet3d's
tools/train.py under torchrun (2 gloo processes on the CPU).

The pedestrians are in frames 0, 3, 4, 7 (see ``make_tiny_nuscenes``): in every iteration
exactly one of the 2 ranks runs the refiner, rank 0 in iterations 0 and 2, rank 1 in 1 and 3.
"""
import json
import os.path as osp

import pytest

from mmdet3d_ddp_guard.cli.demo import REPO_CONFIGS, logged_blocks, plain_ddp_options
from mmdet3d_ddp_guard.examples.tiny_nuscenes import make_tiny_nuscenes
from mmdet3d_ddp_guard.launch import torchrun_train

pytest.importorskip('mmdet3d')

CONFIG = osp.join(REPO_CONFIGS, 'centerpoint',
                  'centerpoint_pillar02_gated-refiner_tiny-nus-3d.py')
REFINER = ['refiner.0.weight', 'refiner.1.weight', 'refiner.1.bias']

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('tiny_nuscenes'))
    make_tiny_nuscenes(root, points_per_frame=2000)
    return root


def _train(data_root, work_dir, *options):
    return torchrun_train(CONFIG, str(work_dir), timeout=240, cfg_options=[
        f'train_dataloader.dataset.data_root={data_root}', *options])


def test_guarded_ddp_trains_centerpoint_with_the_gated_refiner(data_root, tmp_path):
    run = _train(data_root, tmp_path)
    assert run.returncode == 0 and not run.timed_out, run.output[-3000:]

    iteration_lines = [line for line in run.output.splitlines() if 'Iter(train) [' in line]
    assert [line.split('Iter(train) ')[1][:5] for line in iteration_lines] == [
        '[1/4]', '[2/4]', '[3/4]', '[4/4]']
    assert all('unused_params: 3' in line for line in iteration_lines)
    hook_log = '\n'.join(logged_blocks(run.output, 'UnusedParamsHook'))
    assert 'refiner.0 (Conv2d): weight' in hook_log
    assert 'refiner.1 (BatchNorm2d): weight, bias' in hook_log

    with open(tmp_path / 'unused_params_table.json') as f:
        names = {entry['id']: entry['name'] for entry in json.load(f)}
    with open(tmp_path / 'unused_params.jsonl') as f:
        unused = [[sorted(names[i] for i in ids) for ids in json.loads(line)['unused_per_rank']]
                  for line in f]
    refiner = sorted(REFINER)
    assert unused == [[[], refiner], [refiner, []], [[], refiner], [refiner, []]]


def test_plain_ddp_dies_with_the_real_error(data_root, tmp_path):
    # Without UnusedParamsHook, as in a plain mmdet3d config: the hook's own all_gather
    # would meet the allreduce that the rank which ran the refiner is blocked in, and turn
    # DDP's error into a hang.
    run = _train(data_root, tmp_path, *plain_ddp_options())
    assert run.returncode != 0 and not run.timed_out, run.output[-3000:]
    assert 'Expected to have finished reduction in the prior iteration' in run.output
    assert 'Parameter indices which did not receive grad for rank 1' in run.output
