"""The package keeps to Python 3.8 (most mmdet3d users train on it): vermin, a static
analyser, proves that every module's syntax, standard library and annotations (evaluated at
import on 3.8) need nothing newer. The version matrix runs the suite itself on Python 3.8
(tools/version_matrix.sh)."""
import os.path as osp
import subprocess
import sys

from tests.timeouts import scaled

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
VERMIN = [sys.executable, '-c', 'import sys, vermin; sys.exit(vermin.main())',
          '--target=3.8-', '--violations', '--eval-annotations', '--no-tips']


def test_package_needs_nothing_newer_than_python_3_8():
    run = subprocess.run(VERMIN + ['mmdet3d_ddp_guard', 'setup.py'], cwd=REPO,
                         capture_output=True, text=True, timeout=scaled(300))
    assert run.returncode == 0, run.stdout + run.stderr


def test_vermin_catches_what_python_3_8_lacks(tmp_path):
    newer = tmp_path / 'newer.py'
    newer.write_text('def f(x: list[int]) -> str:\n    return "ab".removeprefix("a")\n')
    run = subprocess.run(VERMIN + [str(newer)], capture_output=True, text=True, timeout=scaled(300))
    assert run.returncode != 0
    assert 'removeprefix' in run.stdout and 'list[..]' in run.stdout
