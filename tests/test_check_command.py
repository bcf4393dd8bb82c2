"""`python -m mmdet3d_ddp_guard check CONFIG`: one process, the verdict and the exit code."""
import os
import os.path as osp
import subprocess
import sys

import pytest

from mmdet3d_ddp_guard.__main__ import main
from demo.__main__ import TOY_CONFIG
from tests.timeouts import scaled

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: What pip writes as the installed mmdet3d-ddp-guard (run here by this interpreter): the
#: script's own folder, not the working directory, is first on its sys.path.
CONSOLE_SCRIPT = """import re
import sys
from mmdet3d_ddp_guard.__main__ import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


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


@pytest.fixture
def codebase_root(tmp_path):
    """A codebase's root: ``projects/mmdet3d_plugin`` and a config that imports it."""
    root = tmp_path / 'codebase'
    plugin = root / 'projects' / 'mmdet3d_plugin'
    plugin.mkdir(parents=True)
    (plugin / '__init__.py').write_text("print('[plugin] imported')\n")
    (root / 'config.py').write_text(
        f'_base_ = [{TOY_CONFIG!r}]\ncustom_imports = dict(imports=[\'mmdet3d_ddp_guard\', '
        "'tests.toys', 'projects.mmdet3d_plugin'], "
        'allow_failed_imports=False)\n')
    return root


@pytest.mark.timeout(120)
def test_the_installed_script_imports_the_plugin_from_the_working_directory(codebase_root,
                                                                            tmp_path):
    script = tmp_path / 'bin' / 'mmdet3d-ddp-guard'
    script.parent.mkdir()
    script.write_text(CONSOLE_SCRIPT)
    run = subprocess.run([sys.executable, str(script), 'check', 'config.py', '--iters', '2',
                          '--work-dir', str(tmp_path / 'work')],
                         cwd=str(codebase_root), env=dict(os.environ, PYTHONPATH=REPO),
                         capture_output=True, text=True, timeout=scaled(110))
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert '[plugin] imported' in run.stdout


def test_a_plugin_that_does_not_import_is_named_with_the_fix(codebase_root, tmp_path,
                                                             monkeypatch, capsys):
    monkeypatch.setattr(sys, 'path', list(sys.path))
    monkeypatch.chdir(tmp_path)
    assert main(['check', str(codebase_root / 'config.py')]) == 2
    assert "check: cannot import 'projects.mmdet3d_plugin' (in the config's custom_imports): " \
           "no module 'projects' on the path. Run check from the codebase's root (the folder " \
           'that holds projects/, which its tools/dist_train.sh puts on PYTHONPATH)' \
        in capsys.readouterr().out
