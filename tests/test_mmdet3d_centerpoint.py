"""mmdet3d's own CenterPoint with a custom layer that runs only for batches with a
pedestrian, trained for 4 iterations on tiny synthetic nuScenes data through mmdet3d's
tools/train.py under torchrun (2 gloo processes on the CPU).

The pedestrians are in frames 0, 3, 4, 7 (see ``make_tiny_nuscenes``): in every iteration
exactly one of the 2 ranks runs the refiner, rank 0 in iterations 0 and 2, rank 1 in 1 and 3.
"""
import json
import os.path as osp

import pytest

from mmdet3d_ddp_guard.__main__ import main
from demo.__main__ import REPO_CONFIGS, logged_blocks, plain_ddp_options
from demo.tiny_nuscenes import make_tiny_nuscenes
from demo.launch import torchrun_train
from tests.timeouts import scaled

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
    return torchrun_train(CONFIG, str(work_dir), timeout=scaled(240), cfg_options=[
        f'train_dataloader.dataset.data_root={data_root}', *options])


@pytest.fixture(scope='module')
def guarded_run(data_root, tmp_path_factory):
    """One real 2-rank GuardedDDP run, read by the tests below: (run, its work dir)."""
    work_dir = tmp_path_factory.mktemp('guarded')
    return _train(data_root, work_dir), work_dir


def _hook_unused(work_dir):
    """UnusedParamsHook's per-iteration file as parameter names, [iteration][rank]."""
    with open(work_dir / 'unused_params_table.json') as f:
        names = {entry['id']: entry['name'] for entry in json.load(f)}
    with open(work_dir / 'unused_params.jsonl') as f:
        return [[sorted(names[i] for i in ids) for ids in json.loads(line)['unused_per_rank']]
                for line in f]


def test_guarded_ddp_trains_centerpoint_with_the_gated_refiner(guarded_run):
    run, work_dir = guarded_run
    assert run.returncode == 0 and not run.timed_out, run.output[-3000:]

    iteration_lines = [line for line in run.output.splitlines() if 'Iter(train) [' in line]
    assert [line.split('Iter(train) ')[1][:5] for line in iteration_lines] == [
        '[1/4]', '[2/4]', '[3/4]', '[4/4]']
    assert all('unused_params: 3' in line for line in iteration_lines)
    hook_log = '\n'.join(logged_blocks(run.output, 'UnusedParamsHook'))
    assert 'refiner.0 (Conv2d): weight' in hook_log
    assert 'refiner.1 (BatchNorm2d): weight, bias' in hook_log

    refiner = sorted(REFINER)
    assert _hook_unused(work_dir) == [[[], refiner], [refiner, []], [[], refiner],
                                      [refiner, []]]


@pytest.mark.timeout(400)  # 8 CenterPoint steps in one process (2 ranks x 4 iterations)
def test_check_at_2_ranks_agrees_with_the_real_run_iteration_by_iteration(
        data_root, guarded_run, tmp_path):
    run, work_dir = guarded_run
    assert run.returncode == 0, run.output[-3000:]
    prediction_path = tmp_path / 'prediction.json'
    code = main(['check', CONFIG, '--world-size', '2', '--iters', '4', '--json',
                 str(prediction_path), '--work-dir', str(tmp_path), '--cfg-options',
                 f'train_dataloader.dataset.data_root={data_root}'])
    with open(prediction_path) as f:
        prediction = json.load(f)
    assert [[sorted(names) for names in line['unused_per_rank']]
            for line in prediction['per_iteration']] == _hook_unused(work_dir)
    # Which rank runs the refiner alternates: plain DDP fails at once, a static graph at
    # the second iteration; GuardedDDP trains it (as the real run did).
    assert code == 1
    assert prediction['plain_ddp'] == dict(outcome='fails', first_iteration=0)
    assert prediction['static_graph'] == dict(outcome='fails', first_iteration=1)
    assert prediction['guarded_ddp'] == dict(outcome='ok', first_iteration=None)


def test_plain_ddp_dies_with_the_real_error(data_root, tmp_path):
    # Without UnusedParamsHook, as in a plain mmdet3d config: the hook's own all_gather
    # would meet the allreduce that the rank which ran the refiner is blocked in, and turn
    # DDP's error into a hang.
    run = _train(data_root, tmp_path, *plain_ddp_options())
    assert run.returncode != 0 and not run.timed_out, run.output[-3000:]
    assert 'Expected to have finished reduction in the prior iteration' in run.output
    assert 'Parameter indices which did not receive grad for rank 1' in run.output
