"""Faults never cost the run: torn files, an out_dir that goes away, a changed model.

Real Runners (one process: the faults are rank 0's file I/O) and real files; each test
damages or removes what a crash, a full disk or an edited config would.
"""
import glob
import json
import logging
import os
import os.path as osp

import pytest
import torch
from mmengine.hooks import Hook
from mmengine.registry import HOOKS, MODELS

from mmdet3d_ddp_guard.reporting import history_file
from mmdet3d_ddp_guard.__main__ import main as cli
from tests.toys import ToyDetector
from tests.dist_utils import TRUSTED_LOAD
from tests.scenarios import train_toy_runner


@pytest.fixture(autouse=True)
def _resume_needs_full_pickle(monkeypatch):
    # mmengine 0.10.7 checkpoints hold HistoryBuffer objects that torch >= 2.6 refuses to
    # load with weights_only=True (see README, Limits).
    monkeypatch.setenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')


def _log(work_dir) -> str:
    text = ''
    for path in sorted(glob.glob(osp.join(work_dir, '*', '*.log'))):
        with open(path) as f:
            text += f.read()
    return text


# Checkpoints every 4 iterations and none at the end, as when a run is killed.
NO_LAST_CHECKPOINT = dict(
    default_hooks=dict(logger=dict(type='LoggerHook', interval=1),
                       checkpoint=dict(type='CheckpointHook', interval=4, by_epoch=False,
                                       save_last=False)))


def _iters(result):
    return [line['iter'] for line in result['lines']]


def _tear_last_line(path):
    with open(path, 'rb+') as f:
        size = f.seek(0, os.SEEK_END)
        f.truncate(size - 20)  # the newline and the end of the last line's JSON


def _garble_third_line(path):
    with open(path, 'rb') as f:
        lines = f.read().split(b'\n')
    lines[2] = b'{"iter": 2, "unused_per_rank": [[8, \x00\x00\x00\x00'
    with open(path, 'wb') as f:
        f.write(b'\n'.join(lines))


@pytest.mark.parametrize('damage, warning, lost', [
    (_tear_last_line, 'dropped 1 torn or garbled line(s) at the end of', []),
    (_garble_third_line, 'skipped garbled line 3 of', [2]),
])
def test_resume_survives_a_damaged_file(tmp_path, damage, warning, lost):
    """Iterations 0-9 run, checkpoints at 4 and 8; the file is damaged as a kill mid-write
    (torn end) or a bad block (garbled middle) leaves it; the resume from 8 trains to 12."""
    work_dir = str(tmp_path)
    train_toy_runner(0, 1, work_dir, 'skip_odd', max_iters=10, **NO_LAST_CHECKPOINT)
    damage(osp.join(work_dir, 'unused_params.jsonl'))
    resumed = train_toy_runner(0, 1, work_dir, 'skip_odd', max_iters=12,
                               checkpoint_interval=4, resume=True)
    assert _iters(resumed) == [i for i in range(12) if i not in lost]
    for line, truth in zip(resumed['lines'], resumed['truth']):
        assert sorted(resumed['names'][i] for i in line['unused_per_rank'][0]) == truth[0]
    assert resumed['statistics']['iterations_seen'] == 12
    assert _log(work_dir).count(warning) == 1


@HOOKS.register_module(force=True)
class VanishingDirHook(Hook):
    """Moves ``path`` away after iteration ``away_after`` and back after ``back_after``
    (None: after the run), as an unmounted or deleted out_dir would."""

    priority = 'LOWEST'  # after UnusedParamsHook has written the iteration's line

    def __init__(self, path: str, away_after: int, back_after=None):
        self.path, self.away_after, self.back_after = path, away_after, back_after

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.iter == self.away_after:
            os.rename(self.path, self.path + '.away')
        elif runner.iter == self.back_after:
            os.rename(self.path + '.away', self.path)

    def after_run(self, runner):
        if osp.isdir(self.path + '.away'):
            os.rename(self.path + '.away', self.path)


def _train_with_vanishing_out_dir(work_dir, **vanishing):
    out_dir = osp.join(work_dir, 'report')
    return out_dir, train_toy_runner(
        0, 1, work_dir, 'skip_odd', max_iters=8, checkpoint_interval=4,
        custom_hooks=[dict(type='UnusedParamsHook', out_dir=out_dir),
                      dict(type='VanishingDirHook', path=out_dir, **vanishing)])


def test_out_dir_gone_for_a_while_costs_nothing(tmp_path, capsys):
    work_dir = str(tmp_path)
    out_dir, result = _train_with_vanishing_out_dir(work_dir, away_after=2, back_after=5)
    log = _log(work_dir)
    # One warning with the path and the reason; the waiting lines written on recovery.
    assert log.count('cannot append to') == 1
    assert f'cannot append to {out_dir}/unused_params.jsonl (No such file or directory)' in log
    assert 'is writable again; wrote the lines of iterations 3-6.' in log
    assert _iters(result) == list(range(8))
    # The checkpoint taken during the outage carries the statistics.
    checkpoint = torch.load(osp.join(work_dir, 'iter_4.pth'), **TRUSTED_LOAD)
    assert checkpoint['meta']['unused_params']['iterations_seen'] == 4
    # summarize rebuilds exactly the summary the finished run wrote.
    with open(osp.join(out_dir, 'unused_params_summary.json')) as f:
        written = json.load(f)
    os.remove(osp.join(out_dir, 'unused_params_summary.json'))
    assert cli(['summarize', out_dir]) == 0
    with open(osp.join(out_dir, 'unused_params_summary.json')) as f:
        assert json.load(f) == written
    assert 'Would plain DDP have failed? YES' in capsys.readouterr().out


def test_out_dir_gone_to_the_end_still_finishes_with_the_summary_in_the_log(tmp_path):
    work_dir = str(tmp_path)
    out_dir, result = _train_with_vanishing_out_dir(work_dir, away_after=1)
    log = _log(work_dir)
    assert log.count('cannot append to') == 1
    assert 'iterations 2-7 could not be written to' in log
    assert (f'The summary files could not be written in {out_dir} (No such file or '
            f'directory); once it is writable, `python -m mmdet3d_ddp_guard summarize '
            f'{out_dir}` rebuilds them.') in log
    assert 'Unused parameters over 8 iterations' in log
    assert result['statistics']['iterations_seen'] == 8
    assert _iters(result) == [0, 1]


@MODELS.register_module(force=True)
class ToyDetectorFrozenDead(ToyDetector):
    """ToyDetector with its dead layer frozen: one trainable layer fewer, the same
    parameters (so the model and the optimizer resume)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dead.requires_grad_(False)


def test_resume_with_one_more_trainable_layer_starts_the_statistics_fresh(tmp_path):
    work_dir = str(tmp_path)
    train_toy_runner(0, 1, work_dir, 'skip_odd', max_iters=4, checkpoint_interval=4,
                     model=dict(type='ToyDetectorFrozenDead', pattern='skip_odd'))
    resumed = train_toy_runner(0, 1, work_dir, 'skip_odd', max_iters=6, checkpoint_interval=4,
                               resume=True)
    log = _log(work_dir)
    assert ("the checkpoint's statistics count 8 trainable parameters but this model has 10; "
            'the statistics start fresh at iteration 4') in log
    assert f'The earlier per-iteration file is now {work_dir}/unused_params.jsonl.before-iter4'\
        in log
    assert resumed['statistics']['iterations_seen'] == 2
    assert _iters(resumed) == [4, 5]
    with open(osp.join(work_dir, 'unused_params.jsonl.before-iter4')) as f:
        assert len(f.readlines()) == 4


def test_load_from_a_model_with_one_more_layer_trains(tmp_path):
    """load_from starts a new run: the checkpoint's statistics are not carried over."""
    source = str(tmp_path / 'source')
    train_toy_runner(0, 1, source, 'skip_odd', max_iters=4, checkpoint_interval=4,
                     model=dict(type='ToyDetector', pattern='skip_odd', depth=1))
    result = train_toy_runner(0, 1, str(tmp_path / 'new'), 'skip_odd', max_iters=2,
                              load_from=osp.join(source, 'iter_4.pth'))
    assert result['statistics']['iterations_seen'] == 2
    assert _iters(result) == [0, 1]
    assert 'not carried over' in _log(str(tmp_path / 'new'))


def test_appends_stay_whole_lines_through_an_outage_longer_than_the_buffer(
        tmp_path, monkeypatch, caplog):
    logger = logging.getLogger('test_history_file')
    folder = tmp_path / 'out'
    path = str(folder / 'unused_params.jsonl')

    def line(i):
        return dict(iter=i, epoch=0, unused_per_rank=[[1, 2]])

    monkeypatch.setattr(history_file, 'MAX_PENDING_BYTES', 3 * len(json.dumps(line(0))) + 3)
    history = history_file.HistoryFile(path, logger)
    assert not any([history.append(line(i)) for i in range(6)])  # no folder: all wait
    folder.mkdir()
    (folder / 'unused_params.jsonl').write_bytes(b'{"iter": 0, "unused_per_rank": [[1')
    assert history.append(line(6))
    assert 'iteration(s) (0-3) are missing from' in caplog.text
    assert caplog.text.count('cannot append to') == 1
    # The torn line left by an earlier writer stays alone on its line.
    lines = history_file.read_history(path, logger)
    assert [x['iter'] for x in lines] == [4, 5, 6]
    assert 'skipped garbled line 1 of' in caplog.text
