"""`check --world-size N`: one process predicts what N ranks of plain DDP do, and real gloo
runs of the same config do it.

The example (configs/toy/toy_gated_refiner_pedestrian.py): a refiner that runs only for
batches with a pedestrian; every 4th sample has none. With batch 2 and no shuffling, one
process and 2 ranks always see one, while with 4 ranks rank 0 gets samples 0, 4, 8, ... only.
"""
import json
import os.path as osp
import re

import pytest
import torch
from mmengine.registry import DATA_SAMPLERS

from mmdet3d_ddp_guard.__main__ import main
from demo.__main__ import REPO_CONFIGS, plain_ddp_options
from demo.launch import torchrun_train

pytest.importorskip('mmcv')
from tests.toys.gated_refiner_toy import ToyGatedRefinerDetector  # noqa: E402
from tests.timeouts import scaled  # noqa: E402

CONFIG = osp.join(REPO_CONFIGS, 'toy', 'toy_gated_refiner_pedestrian.py')
REFINER = ['refiner.0.weight', 'refiner.0.bias', 'refiner.1.weight', 'refiner.1.bias']
SYNC_BN = ['--cfg-options', 'model.refiner_norm_cfg.type=SyncBN']


def _check(tmp_path, *argv):
    """Runs the command; returns its exit code, the JSON it wrote and what it printed."""
    path = tmp_path / 'prediction.json'
    code = main(['check', CONFIG, '--json', str(path), '--work-dir', str(tmp_path), *argv])
    with open(path) as f:
        return code, json.load(f)


@pytest.mark.parametrize('world_size', [1, 2])
def test_one_and_two_ranks_predict_ok(tmp_path, world_size):
    code, prediction = _check(tmp_path, '--world-size', str(world_size))
    assert code == 0
    assert prediction['plain_ddp'] == dict(outcome='ok', first_iteration=None)
    assert [line['unused_per_rank'] for line in prediction['per_iteration']] == \
        [[[]] * world_size] * 4


def test_four_ranks_predict_fails_at_iteration_0_on_rank_0(tmp_path, capsys):
    code, prediction = _check(tmp_path, '--world-size', '4', '--png',
                              str(tmp_path / 'ranks.png'))
    assert code == 1
    assert prediction['world_size'] == 4 and prediction['iterations'] == 4
    assert prediction['plain_ddp'] == dict(outcome='fails', first_iteration=0)
    # Rank 0's samples (0, 4), (8, 12), ... never hold a pedestrian: its unused set never
    # changes, so static_graph=True would train.
    assert [line['unused_per_rank'] for line in prediction['per_iteration']] == \
        [[REFINER, [], [], []]] * 4
    assert prediction['static_graph'] == dict(outcome='ok', first_iteration=None)
    assert prediction['guarded_ddp'] == dict(outcome='ok', first_iteration=None)
    assert prediction['forward_collectives_skipped'] == []
    out = capsys.readouterr().out
    assert 'fails at iteration 0, caused by rank(s) 0.' in out
    assert 'refiner.0 (Linear): weight, bias' in out
    assert osp.getsize(tmp_path / 'ranks.png') > 1000


def test_sync_batchnorm_in_the_skipped_refiner_predicts_hangs(tmp_path, capsys):
    code, prediction = _check(tmp_path, '--world-size', '4', *SYNC_BN)
    assert code == 1
    assert prediction['plain_ddp'] == dict(outcome='hangs', first_iteration=0)
    assert prediction['static_graph']['outcome'] == 'hangs'
    assert prediction['guarded_ddp'] == dict(outcome='hangs', first_iteration=0)
    assert prediction['forward_collectives_skipped'][0] == dict(
        module='refiner.1', type='SyncBatchNorm', iter=0, ranks_skipped=[0],
        ranks_ran=[1, 2, 3], calls_per_rank=[0, 1, 1, 1],
        config_key='model.refiner_norm_cfg')
    out = capsys.readouterr().out
    assert 'refiner.1 (SyncBatchNorm) ran on rank(s) 1, 2, 3 and not on rank(s) 0, first ' \
        'in iteration 0; change model.refiner_norm_cfg' in out
    assert 'No DDP option helps, the guard included' in out


def test_sync_batchnorm_on_two_ranks_that_both_run_it_is_ok(tmp_path):
    code, prediction = _check(tmp_path, '--world-size', '2', *SYNC_BN)
    assert code == 0 and prediction['forward_collectives_skipped'] == []


@pytest.mark.timeout(200)
def test_real_four_rank_plain_ddp_fails_where_predicted(tmp_path):
    _, prediction = _check(tmp_path, '--world-size', '4')
    run = torchrun_train(CONFIG, str(tmp_path / 'run'), nproc=4,
                         cfg_options=plain_ddp_options(), timeout=scaled(150))
    assert run.returncode != 0 and not run.timed_out, run.output[-3000:]
    reported = dict(re.findall(r'Parameter indices which did not receive grad for rank '
                               r'(\d+): ([\d ]+)', run.output))
    # Only rank 0 raised: the others were waiting in the all-reduce when torchrun ended them.
    assert list(reported) == ['0']
    names = [name for name, p in ToyGatedRefinerDetector().named_parameters()
             if p.requires_grad]
    ddp_names = sorted(names[int(i)] for i in reported['0'].split())
    assert ddp_names == sorted(prediction['per_iteration'][0]['unused_per_rank'][0])
    # Iteration 0 ended (its log line), the forward of iteration 1 raised.
    assert 'Iter(train) [1/4]' in run.output and 'Iter(train) [2/4]' not in run.output


@pytest.mark.timeout(200)
def test_real_four_rank_static_graph_trains_as_predicted(tmp_path):
    # Each rank keeps its own unused set from the first iteration: DDP's static graph
    # accepts that, as the prediction above says.
    run = torchrun_train(CONFIG, str(tmp_path), nproc=4, timeout=scaled(150),
                         cfg_options=plain_ddp_options() + ['model_wrapper_cfg.static_graph=True'])
    assert run.returncode == 0 and 'Iter(train) [4/4]' in run.output, run.output[-3000:]


@pytest.mark.timeout(200)
def test_real_two_rank_plain_ddp_trains(tmp_path):
    run = torchrun_train(CONFIG, str(tmp_path), nproc=2, cfg_options=plain_ddp_options(),
                         timeout=scaled(150))
    assert run.returncode == 0 and 'Iter(train) [4/4]' in run.output, run.output[-3000:]


@DATA_SAMPLERS.register_module(force=True)
class UnshardedSampler(torch.utils.data.SequentialSampler):
    """A sampler that knows nothing of ranks (every rank would see every sample)."""

    def __init__(self, dataset, seed=None):
        super().__init__(dataset)


@pytest.mark.parametrize('argv, words', [
    (['--world-size', '0'], '--world-size must be a positive integer (the number of GPUs), '
                            'not 0.'),
    (['--world-size', '2', '--json', 'no/such/dir/p.json'], "--json 'no/such/dir/p.json'"),
    (['--cfg-options', 'train_dataloader.sampler.type=UnshardedSampler'],
     'train_dataloader.sampler UnshardedSampler does not take its rank from get_dist_info()'),
    (['--cfg-options', 'train_dataloader.sampler.type=NoSuchSampler'],
     "train_dataloader.sampler.type='NoSuchSampler' is not a registered sampler"),
])
def test_bad_usage_exits_2_with_a_one_line_reason(argv, words, capsys):
    assert main(['check', CONFIG, *argv]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith('check: ') and words in out[-1]
