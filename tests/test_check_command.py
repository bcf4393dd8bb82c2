"""`python -m mmdet3d_ddp_guard check CONFIG`: one process, the verdict and the exit code."""
import subprocess
import sys

import pytest

from mmdet3d_ddp_guard.__main__ import main
from mmdet3d_ddp_guard.cli.demo import TOY_CONFIG
from tests.timeouts import scaled


def test_exits_1_and_names_parameters_when_plain_ddp_would_fail(tmp_path, capsys):
    assert main(['check', TOY_CONFIG, '--work-dir', str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert 'YES: plain DDP (find_unused_parameters=False) fails at iteration 0' in out
    assert 'branch.weight  (16, 16)' in out and 'dead.bias' in out
    assert "model_wrapper_cfg = dict(type='GuardedDDP')" in out
    # The verdict names the guard in both frameworks' words (mmcv 1.x has no GuardedDDP).
    assert '\nThe guard (mmdet3d_ddp_guard): trains it.\n' in out


def test_exits_0_when_every_parameter_is_used(tmp_path, capsys):
    assert main(['check', TOY_CONFIG, '--work-dir', str(tmp_path),
                 '--cfg-options', 'model.pattern=none']) == 0
    assert 'would not have failed' in capsys.readouterr().out


@pytest.mark.parametrize('argv, words', [
    (['check', TOY_CONFIG, '--iters', '0'], '--iters must be a positive integer'),
    (['check', 'no/such/config.py'], "no config file at 'no/such/config.py'"),
])
def test_bad_usage_exits_2(argv, words, capsys):
    assert main(argv) == 2
    assert words in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_console_entry_point_runs_as_a_module(tmp_path):
    run = subprocess.run([sys.executable, '-m', 'mmdet3d_ddp_guard', 'check', TOY_CONFIG,
                          '--iters', '2', '--work-dir', str(tmp_path)],
                         capture_output=True, text=True, timeout=scaled(110))
    assert run.returncode == 1, run.stderr[-2000:]
