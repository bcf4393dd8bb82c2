"""``python -m mmdet3d_ddp_guard summarize WORK_DIR``: the post-mortem of a run that died."""
import json
import os.path as osp

import pytest

from mmdet3d_ddp_guard.__main__ import main as cli
from demo.__main__ import TOY_CONFIG
from demo.launch import torchrun_train
from tests.dist_utils import run_distributed
from tests.scenarios import train_toy_runner
from tests.timeouts import scaled


def _complete_lines(path):
    if not osp.exists(path):
        return 0
    with open(path, 'rb') as f:
        return f.read().count(b'\n')


@pytest.mark.timeout(240)
def test_a_killed_two_rank_run_gets_the_verdict_the_finished_run_would_have(tmp_path, capsys):
    killed = str(tmp_path / 'killed')
    jsonl = osp.join(killed, 'unused_params.jsonl')
    run = torchrun_train(TOY_CONFIG, killed, timeout=scaled(150),
                         cfg_options=['train_cfg.max_iters=100000', 'model.pattern=rank_dependent'],
                         stop_when=lambda: _complete_lines(jsonl) >= 3)
    assert run.stopped, run.output[-3000:]
    assert cli(['summarize', killed]) == 0
    out = capsys.readouterr().out
    with open(osp.join(killed, 'unused_params_summary.json')) as f:
        rebuilt = json.load(f)
    iterations = rebuilt['iterations_seen']
    assert f'Rebuilt from {iterations} iterations' in out
    assert 'Would plain DDP have failed? YES' in out and 'dead.weight' in out
    assert osp.getsize(osp.join(killed, 'unused_params_summary.png')) > 1000
    # The same model trained to that iteration and finished normally.
    finished = str(tmp_path / 'finished')
    run_distributed(train_toy_runner, finished, 'rank_dependent', dict(type='GuardedDDP'),
                    max_iters=iterations, timeout=150)
    with open(osp.join(finished, 'unused_params_summary.json')) as f:
        assert rebuilt == json.load(f)


def test_bad_usage_exits_2_naming_the_problem(tmp_path, capsys):
    assert cli(['summarize', str(tmp_path / 'nowhere')]) == 2
    assert 'no folder at' in capsys.readouterr().out
    assert cli(['summarize', str(tmp_path)]) == 2
    assert 'unused_params_table.json and' in capsys.readouterr().out
    (tmp_path / 'unused_params_table.json').write_text('[{"id": 0, "na')
    (tmp_path / 'unused_params.jsonl').write_text('')
    assert cli(['summarize', str(tmp_path)]) == 2
    assert 'cannot read the parameter table' in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        cli(['summarize'])
    assert exited.value.code == 2


def test_a_run_killed_before_its_first_line_is_named(tmp_path, capsys):
    train_toy_runner(0, 1, str(tmp_path), 'skip_odd', max_iters=1)
    (tmp_path / 'unused_params.jsonl').write_text('{"iter": 0, "epo')
    assert cli(['summarize', str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert 'holds no complete line' in captured.out
    assert 'dropped 1 torn or garbled line(s) at the end' in captured.err
