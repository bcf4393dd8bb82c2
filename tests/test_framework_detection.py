"""How the package finds a framework: by the module Python would import, its version read
from the module's own files, without importing it (issue 60). Real imports of real folders on
``PYTHONPATH`` in a fresh interpreter: a copy first on the path wins over the installed
distribution, a folder that says no version is refused naming its path and the fix, a too-old
one is refused naming where it was imported from. (mmengine-lite, onedl-mmengine and a real
source tree train through the Runner in the mmengine_forms leg: tests/mmengine_forms.)"""
import os
import subprocess
import sys

import pytest

from mmdet3d_ddp_guard.environment.frameworks import found_frameworks, read_version

PROBE = 'import mmdet3d_ddp_guard; print(mmdet3d_ddp_guard.FRAMEWORKS)'


def _import_with(path, code=PROBE):
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              [str(path), os.getcwd()])))


def _package(root, name, files):
    folder = root / name
    folder.mkdir()
    for file_name, text in files.items():
        (folder / file_name).write_text(text)
    return folder


def test_the_installed_frameworks_are_found_with_their_own_versions():
    found = found_frameworks()
    import torch
    assert found['torch'].version == torch.__version__
    assert found['torch'].path == os.path.dirname(torch.__file__)


@pytest.mark.parametrize('files, version', [
    ({'version.py': "__version__ = '0.10.7'\n"}, '0.10.7'),
    ({'__version__.py': "__version__: str = '2.6.6'\n"}, '2.6.6'),
    ({'version.info': '2.6.6\n'}, '2.6.6'),
], ids=['version.py', 'annotated', 'version.info'])
def test_a_version_is_read_from_the_package_s_own_files(tmp_path, files, version):
    assert read_version(str(_package(tmp_path, 'somepackage', files))) == version


def test_a_framework_folder_that_says_no_version_is_refused_with_its_path(tmp_path):
    folder = _package(tmp_path, 'mmengine', {'__init__.py': ''})
    run = _import_with(tmp_path)
    assert run.returncode != 0
    assert f"Python imports 'mmengine' from {folder}, but neither that folder" in run.stderr
    assert 'Fix: install' in run.stderr


def test_a_too_old_framework_first_on_the_path_is_refused_naming_where_it_was(tmp_path):
    folder = _package(tmp_path, 'mmengine', {'__init__.py': "__version__ = '0.7.4'\n",
                                             'version.py': "__version__ = '0.7.4'\n"})
    run = _import_with(tmp_path)
    assert run.returncode != 0
    assert 'mmdet3d_ddp_guard needs mmengine >= 0.8' in run.stderr
    assert f"(Python imports 'mmengine' from {folder}.)" in run.stderr


def test_an_mmcv_2_folder_is_not_mmcv_1(tmp_path):
    _package(tmp_path, 'mmcv', {'__init__.py': '', 'version.py': "__version__ = '2.1.0'\n"})
    run = _import_with(tmp_path, 'from mmdet3d_ddp_guard.environment.frameworks import '
                                 'found_frameworks; print(sorted(found_frameworks()))')
    assert run.returncode == 0, run.stderr
    assert 'mmcv-full' not in run.stdout
