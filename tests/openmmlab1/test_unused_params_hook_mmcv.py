"""UnusedParamsHook under OpenMMLab 1.x (mmcv-full 1.x, mmdet 2.x), trained for real.

Two gloo ranks under torchrun through the codebase-shaped plugin's train script, on the
RetinaNet whose refiner rank 1's batches never run (tests/openmmlab1/branch_detector.py):
under the guard (the hook reads the wrapper's record) and under mmcv's own DDP with the
graph search (the hook installs its own record and exchanges masks). Resume and load_from
run in this process on mmcv's runners (a resume through the train scripts needs CUDA:
IterBasedRunner.resume maps the checkpoint to torch.cuda.current_device()).
"""
import json
import logging
import os
import os.path as osp
import re

import pytest
import torch
import torch.nn as nn
from mmcv.parallel import MMDataParallel
from mmcv.runner import EpochBasedRunner, IterBasedRunner
from torch.utils.data import DataLoader

from mmdet3d_ddp_guard.__main__ import main as cli
from mmdet3d_ddp_guard.openmmlab1 import UnusedParamsHook
from mmdet3d_ddp_guard.reporting.history_file import replay_statistics
from tests.openmmlab1.branch_detector import REFINER_PARAMS
from tests.openmmlab1.launch import PLUGIN_CONFIGS, PLUGIN_TRAIN, train
from tests.timeouts import scaled

HOOKED = osp.join(PLUGIN_CONFIGS, 'plugin_tiny_retinanet_branch_guarded_hook.py')
# mmcv's own DDP, unguarded, with DDP's graph search: the hook's own record.
PLAIN_FIND_UNUSED = ('ddp_guard.enabled=False', 'find_unused_parameters=True')
ITER_LINE = re.compile(r'Iter \[(\d+)/4\][^\n]*')


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp('tiny_coco'))


def _train(data_root, work_dir, cfg_options=()):
    run = train(PLUGIN_TRAIN, HOOKED, work_dir, data_root, cfg_options=cfg_options,
                timeout=scaled(180))
    assert not run.timed_out, run.output[-3000:]
    return run


def _read(work_dir, name):
    with open(osp.join(work_dir, name)) as f:
        return json.load(f) if name.endswith('.json') else [json.loads(x) for x in f]


def _assert_rank_1_left_the_refiner_unused(work_dir):
    """The files hold, for each of the 4 iterations, rank 1's refiner and nothing of rank
    0's; the summary says so."""
    names = [row['name'] for row in _read(work_dir, 'unused_params_table.json')]
    lines = _read(work_dir, 'unused_params.jsonl')
    assert [line['iter'] for line in lines] == [0, 1, 2, 3]
    for line in lines:
        rank0, rank1 = line['unused_per_rank']
        assert rank0 == [] and sorted(names[i] for i in rank1) == sorted(REFINER_PARAMS)
        assert line['ranks_left_unreached'] == 1  # what makes plain DDP fail
    summary = _read(work_dir, 'unused_params_summary.json')
    assert summary['world_size'] == 2 and summary['iterations_seen'] == 4
    assert {p['name']: (p['iterations_unused'], p['ranks']) for p in summary['parameters']} \
        == {name: (4, [1]) for name in REFINER_PARAMS}
    assert summary['verdict']['plain_ddp_fails'] is True
    assert summary['verdict']['plain_ddp_first_failure_iteration'] == 0
    with open(osp.join(work_dir, 'unused_params_summary.txt')) as f:
        assert 'Would plain DDP have failed? YES' in f.read()
    assert osp.getsize(osp.join(work_dir, 'unused_params_summary.png')) > 1000
    return summary


def _assert_checkpoint_counts_the_iterations_before_its_own(work_dir):
    """iter_4.pth is saved during iteration 3 with meta iter=3, where a resume goes on."""
    meta = torch.load(osp.join(work_dir, 'iter_4.pth'), map_location='cpu')['meta']
    assert meta['iter'] == 3 and meta['unused_params']['iterations_seen'] == 3


def _logged_iterations(output):
    """{iteration shown: its log line} of rank 0's mmcv TextLoggerHook lines."""
    return {int(match.group(1)): match.group(0) for match in ITER_LINE.finditer(output)}


@pytest.mark.timeout(400)
def test_guarded_run_writes_the_files_and_the_log_field(data_root, tmp_path, capsys):
    work_dir = str(tmp_path / 'guarded')
    run = _train(data_root, work_dir)
    assert run.returncode == 0, run.output[-3000:]
    assert ("MMDistributedDataParallel (guarded by mmdet3d_ddp_guard) decision (at build): "
            "mode='complete'") in run.output
    summary = _assert_rank_1_left_the_refiner_unused(work_dir)
    # The field on every log line, from runner.log_buffer, before TextLoggerHook printed.
    logged = _logged_iterations(run.output)
    assert sorted(logged) == [1, 2, 3, 4]
    assert all(line.endswith('unused_params: 3.0000') for line in logged.values()), logged
    # The names, by the ranks that left them unused.
    assert 'UnusedParamsHook: iteration 0: 3 parameters unused (0 on every rank)' in run.output
    assert re.search(r'only on rank\(s\) 1:\n\s+refiner', run.output), run.output[-3000:]
    assert 'UnusedParamsHook summary' in run.output
    _assert_checkpoint_counts_the_iterations_before_its_own(work_dir)
    # summarize rebuilds the summary from the files alone.
    for suffix in ('json', 'txt', 'png'):
        os.remove(osp.join(work_dir, f'unused_params_summary.{suffix}'))
    assert cli(['summarize', work_dir]) == 0
    assert _read(work_dir, 'unused_params_summary.json') == summary
    assert 'refiner.0.weight' in capsys.readouterr().out


@pytest.mark.timeout(400)
def test_plain_ddp_graph_search_gets_the_hooks_own_record(data_root, tmp_path):
    """Unguarded, the hook installs its record and the ranks exchange their masks at the log
    lines (every 2 iterations here): the same files, and each logged window exact."""
    work_dir = str(tmp_path / 'plain')
    run = _train(data_root, work_dir, (*PLAIN_FIND_UNUSED, 'log_config.interval=2'))
    assert run.returncode == 0, run.output[-3000:]
    assert 'guarded by mmdet3d_ddp_guard) decision' not in run.output
    _assert_rank_1_left_the_refiner_unused(work_dir)
    logged = _logged_iterations(run.output)
    assert sorted(logged) == [2, 4]
    assert all(line.endswith('unused_params: 3.0000') for line in logged.values()), logged
    _assert_checkpoint_counts_the_iterations_before_its_own(work_dir)


@pytest.mark.timeout(400)
def test_plain_ddp_fast_path_stops_with_the_names_instead_of_hanging(data_root, tmp_path):
    run = _train(data_root, str(tmp_path / 'strict'),
                 ('ddp_guard.enabled=False', 'find_unused_parameters=False'))
    assert run.returncode != 0
    assert 'UnusedParametersError' in run.output and 'refiner.0.weight' in run.output


# -- one process, mmcv's runners: checkpoints, resume, load_from -------------------------


class BranchToy(nn.Module):
    """A branch that odd samples skip, and a dead layer (frozen with ``frozen_dead``: the
    same parameters, two trainable ones fewer); mmcv's train_step interface."""

    def __init__(self, frozen_dead=False):
        super().__init__()
        self.trunk = nn.Linear(4, 4)
        self.branch = nn.Linear(4, 1)
        self.dead = nn.Linear(4, 1)
        self.dead.requires_grad_(not frozen_dead)

    def train_step(self, data, optimizer):
        x = self.trunk(data)
        loss = x.pow(2).mean()
        if data[0, 0] > 0:  # the dataset's even samples
            loss = loss + self.branch(x).mean()
        return dict(loss=loss, log_vars=dict(loss=loss.item()), num_samples=1)


SKIPPED = {'branch.weight', 'branch.bias'}  # on odd iterations
DEAD = {'dead.weight', 'dead.bias'}


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _train_toy(work_dir, runner_type='iter', max_length=8, resume_from=None, load_from=None,
               frozen_dead=False):
    """Trains BranchToy on one process; 4 samples per epoch, checkpoints every 4 iterations
    (iter runner) or every epoch; returns the hook, the log and the per-iteration lines."""
    torch.manual_seed(0)
    model = MMDataParallel(BranchToy(frozen_dead))
    samples = [torch.full((1, 4), 1.0 if i % 2 == 0 else -1.0) for i in range(4)]
    loader = DataLoader(samples, batch_size=None, shuffle=False)
    logger = logging.getLogger(f'toy.{abs(hash(work_dir))}.{resume_from}.{load_from}')
    logger.setLevel(logging.INFO)
    handler = ListHandler()
    logger.addHandler(handler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    by_epoch = runner_type == 'epoch'
    runner = (EpochBasedRunner(model, optimizer=optimizer, work_dir=work_dir, logger=logger,
                               max_epochs=max_length // 4) if by_epoch else
              IterBasedRunner(model, optimizer=optimizer, work_dir=work_dir, logger=logger,
                              max_iters=max_length))
    runner.register_training_hooks(
        None, dict(grad_clip=None), dict(interval=1 if by_epoch else 4, by_epoch=by_epoch),
        dict(interval=1, hooks=[dict(type='TextLoggerHook', by_epoch=by_epoch)]))
    hook = UnusedParamsHook(interval=2)
    runner.register_hook(hook)  # NORMAL, as custom_hooks registers it
    if resume_from:
        runner.resume(resume_from, map_location='cpu')
    elif load_from:
        runner.load_checkpoint(load_from, map_location='cpu')
    runner.run([loader], [('train', 1)])
    logger.removeHandler(handler)
    return hook, '\n'.join(handler.messages), _read(work_dir, 'unused_params.jsonl')


def _named(hook, line):
    return set(hook.record.table.names[i] for i in line['unused_per_rank'][0])


# IterBasedRunner saves iter_4.pth during iteration 3 with meta iter=3 and trains iteration
# 3 again after resuming from it, from the loader's first sample; EpochBasedRunner's
# epoch_1.pth says iter=4, and the resumed run goes on at iteration 4.
RESUMES = {'iter': ('iter_4.pth', 3), 'epoch': ('epoch_1.pth', 4)}


@pytest.mark.parametrize('runner_type', sorted(RESUMES))
def test_resume_carries_the_counts_through_the_checkpoint(tmp_path, runner_type):
    """Iterations 0-3 run (and a line of iteration 4 is left, as by a crash after the
    checkpoint); the resume trains to 8: the file holds each iteration once, the counts
    cover exactly its lines, so the summary and ``summarize`` agree."""
    checkpoint, resumed_at = RESUMES[runner_type]
    work_dir = str(tmp_path)
    _train_toy(work_dir, runner_type, max_length=4)
    meta = torch.load(osp.join(work_dir, checkpoint), map_location='cpu')['meta']
    assert meta['iter'] == resumed_at
    assert meta['unused_params']['iterations_seen'] == resumed_at
    with open(osp.join(work_dir, 'unused_params.jsonl'), 'a') as f:
        f.write(json.dumps(dict(iter=4, epoch=1, unused_per_rank=[[0]])) + '\n')
    hook, log, lines = _train_toy(work_dir, runner_type,
                                  resume_from=osp.join(work_dir, checkpoint))
    assert [line['iter'] for line in lines] == list(range(8))
    # The sample each iteration read: the loader starts over at the resumed iteration.
    samples = list(range(resumed_at)) + list(range(8 - resumed_at))
    assert [_named(hook, line) for line in lines] == \
        [DEAD if sample % 2 == 0 else DEAD | SKIPPED for sample in samples]
    statistics = hook.record.statistics.state_dict()
    assert statistics == replay_statistics(len(hook.record.table), lines).state_dict()
    assert statistics['iterations_seen'] == 8
    assert _read(work_dir, 'unused_params_summary.json')['iterations_seen'] == 8
    assert 'no unused-parameter statistics' not in log


def test_resume_of_another_model_starts_fresh_and_load_from_starts_new_counts(tmp_path):
    source = str(tmp_path / 'source')
    _train_toy(source, max_length=4, frozen_dead=True)
    hook, log, lines = _train_toy(source, max_length=6, resume_from=osp.join(source,
                                                                             'iter_4.pth'))
    # iter_4.pth goes on at iteration 3 (see RESUMES).
    assert ("the checkpoint's statistics count 4 trainable parameters but this model has 6; "
            'the statistics start fresh at iteration 3') in log
    assert f'The earlier per-iteration file is now {source}/unused_params.jsonl.before-iter3' \
        in log
    assert [line['iter'] for line in lines] == [3, 4, 5]
    assert hook.record.statistics.iterations_seen == 3
    new = str(tmp_path / 'new')
    hook, log, lines = _train_toy(new, max_length=2, load_from=osp.join(source, 'iter_4.pth'))
    assert 'not carried over' in log
    assert [line['iter'] for line in lines] == [0, 1]
    assert hook.record.statistics.iterations_seen == 2


def test_log_field_on_one_process(tmp_path):
    hook, log, lines = _train_toy(str(tmp_path), max_length=4)
    shown = re.findall(r'Iter \[(\d)/4\][^\n]*unused_params: (\d)\.0000', log)
    assert shown == [('1', '2'), ('2', '4'), ('3', '2'), ('4', '4')]
    assert 'UnusedParamsHook: iteration 0: 2 parameters unused' in log
    assert hook.record.world_size == 1 and len(lines) == 4


@pytest.mark.parametrize('kwargs, error, words', [
    (dict(interval=0), ValueError, 'interval must be a positive integer'),
    (dict(max_modules_in_log=1.5), ValueError, 'max_modules_in_log must be a positive'),
    (dict(intervall=5), TypeError, r"unknown option\(s\) \['intervall'\]"),
])
def test_bad_options_are_named(kwargs, error, words):
    with pytest.raises(error, match=words):
        UnusedParamsHook(**kwargs)
