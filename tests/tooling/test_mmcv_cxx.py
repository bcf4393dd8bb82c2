"""tools/mmcv_cxx.sh, the compiler make_venv gives mmcv's build, on a miniature of mmcv's source
layout: it writes the precompiled header once, gcc uses it, a source compiled with other flags
still compiles (from the header itself) instead of failing, no compile waits while another
writes the header, and no debug information is written even where the flags ask for it."""
import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.timeouts import scaled

WRAPPER = Path(__file__).resolve().parents[2] / 'tools' / 'mmcv_cxx.sh'

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ('c++', 'flock', 'readelf')),
    reason='needs a C++ compiler, flock and readelf')


def _miniature_mmcv(root: Path) -> Path:
    common = root / 'mmcv' / 'ops' / 'csrc' / 'common'
    common.mkdir(parents=True)
    (common / 'pytorch_cpp_helper.hpp').write_text(
        '#ifndef PYTORCH_CPP_HELPER\n#define PYTORCH_CPP_HELPER\n#include <vector>\n'
        'inline int helper() { return HELPER_VALUE; }\n#endif\n')
    sources = root / 'mmcv' / 'ops' / 'csrc' / 'pytorch'
    sources.mkdir(parents=True)
    (sources / 'op.cpp').write_text(
        '#include "pytorch_cpp_helper.hpp"\nint op() { return helper(); }\n')
    # As mmcv's box_iou_rotated.cpp: another header first, where gcc cannot use a .gch.
    (sources / 'late.cpp').write_text(
        '#include <vector>\n#include "pytorch_cpp_helper.hpp"\nint late() { return helper(); }\n')
    return common


def _compile_as_torch_does(root: Path, common: Path, *flags: str,
                           source_name: str = 'op.cpp') -> subprocess.CompletedProcess:
    """The command line torch's ninja rule writes for mmcv 2.1.0 on torch 2.13 with setuptools
    80.9 ($cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags), with the second -c its
    $cflags held when CFLAGS was set in the environment; -H makes gcc list what it read, a
    used .gch marked '!'."""
    source = root / 'mmcv' / 'ops' / 'csrc' / 'pytorch' / source_name
    command = ['bash', str(WRAPPER), '-MMD', '-MF', str(root / 'op.o.d'), '-g', '-O1', '-fPIC',
               f'-I{common}', '-H', *flags, '-c', '-c', str(source), '-o', str(root / 'op.o'),
               '-std=c++17', '-DTORCH_EXTENSION_NAME=_ext']
    return subprocess.run(command, capture_output=True, text=True, timeout=scaled(120))


def test_header_is_precompiled_once_and_used(tmp_path):
    common = _miniature_mmcv(tmp_path)
    first = _compile_as_torch_does(tmp_path, common, '-DHELPER_VALUE=1')
    assert first.returncode == 0, first.stderr
    gch = common / 'pytorch_cpp_helper.hpp.gch'
    assert gch.is_file() and (tmp_path / 'op.o').is_file()
    assert f'! {gch}' in first.stderr, first.stderr
    written = gch.stat().st_mtime_ns
    second = _compile_as_torch_does(tmp_path, common, '-DHELPER_VALUE=1')
    assert second.returncode == 0, second.stderr
    assert gch.stat().st_mtime_ns == written, 'the .gch was written again'
    assert f'! {gch}' in second.stderr, second.stderr
    sections = subprocess.run(['readelf', '-S', str(tmp_path / 'op.o')], capture_output=True,
                              text=True, check=True).stdout
    assert '.text' in sections and '.debug_info' not in sections, sections


def test_other_flags_compile_from_the_header_and_say_so(tmp_path):
    common = _miniature_mmcv(tmp_path)
    assert _compile_as_torch_does(tmp_path, common, '-DHELPER_VALUE=1').returncode == 0
    other = _compile_as_torch_does(tmp_path, common, '-DHELPER_VALUE=2')
    assert other.returncode == 0, other.stderr
    assert 'not used because' in other.stderr, other.stderr
    assert f'! {common}' not in other.stderr, other.stderr


def test_no_compile_waits_for_the_header_being_written(tmp_path):
    """While another compile holds the lock (writing the .gch), a source compiles from the
    header at once; a source that includes the header later never takes the lock and never
    writes the .gch."""
    common = _miniature_mmcv(tmp_path)
    gch = common / 'pytorch_cpp_helper.hpp.gch'
    with open(common / 'pytorch_cpp_helper.hpp.gch.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        busy = _compile_as_torch_does(tmp_path, common, '-DHELPER_VALUE=1')
        assert busy.returncode == 0, busy.stderr
        assert (tmp_path / 'op.o').is_file() and not gch.exists()
        assert f'! {gch}' not in busy.stderr, busy.stderr
    late = _compile_as_torch_does(tmp_path, common, '-DHELPER_VALUE=1', source_name='late.cpp')
    assert late.returncode == 0, late.stderr
    assert not gch.exists(), 'a source that cannot use the .gch wrote it'


def test_sources_outside_mmcv_compile_unchanged(tmp_path):
    source = tmp_path / 'plain.cpp'
    source.write_text('int plain() { return 3; }\n')
    result = subprocess.run(
        ['bash', str(WRAPPER), '-c', str(source), '-o', str(tmp_path / 'plain.o')],
        capture_output=True, text=True, timeout=scaled(120))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / 'plain.o').is_file()
    assert not list(tmp_path.glob('**/*.gch'))
