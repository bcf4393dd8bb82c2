"""MMEngine however it was installed (issue 60): mmengine-lite, onedl-mmengine and a source
tree on ``PYTHONPATH``, each alone in a venv that has no ``mmengine`` distribution (the
``mmengine_forms`` leg of tools/version_matrix.sh; ``tools/mmengine_forms.sh`` puts each in a
folder of its own). With the README's two config lines, a branch used on some ranks only
trains through MMEngine's Runner on 2 gloo ranks bit for bit as MMEngine's wrapper with
``find_unused_parameters=True``; without them, the Runner dies as MMEngine's wrapper does;
``--version`` names the folder and the distribution (or none)."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

#: The folder holding one folder per form (set by the leg).
FORMS = os.environ.get('DDP_GUARD_MMENGINE_FORMS')
pytestmark = pytest.mark.skipif(
    not FORMS, reason='the mmengine_forms leg of tools/version_matrix.sh runs these')

#: Per form: the version it says, and how --version names what installed it.
EXPECTED = {
    'lite': ('0.10.7', 'distribution mmengine-lite 0.10.7'),
    'onedl': ('0.10.12', 'distribution onedl-mmengine 0.10.12'),
    'source': ('0.10.7', 'no distribution installed it'),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize('form', sorted(EXPECTED))
def test_the_readme_lines_train_with_this_mmengine_as_mmengine_s_own_graph_search(form):
    folder = osp.join(FORMS, form)
    tests_root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([folder, tests_root]))
    run = subprocess.run([sys.executable, '-m', 'tests.mmengine_forms.form_runs'],
                         capture_output=True, text=True, env=environment, cwd=tests_root)
    lines = [line for line in run.stdout.splitlines() if line.startswith('FORM RESULT ')]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(lines[-1][len('FORM RESULT '):])
    version, installed_by = EXPECTED[form]
    assert result['frameworks']['mmengine'] == version
    assert result['registered']
    assert f'mmengine {version} at {osp.join(folder, "mmengine")} ({installed_by}' \
        in result['report'], result['report']
    assert result['wrappers'] == ['GuardedDDP', 'MMDistributedDataParallel']
    assert result['same_params'] == [True, True]
    assert 'Expected to have finished reduction' in result['without_the_lines']
