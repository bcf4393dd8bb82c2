"""Importing the package changes only what the README lists (its section "What importing it
changes"), and what each adapter's ``import_changes`` module lists: compared in a fresh
process, before and after ``import mmdet3d_ddp_guard`` (tests/import_changes_probe.py), on
the stack that is installed (MMEngine, or mmcv-full 1.x alone in the openmmlab1 leg).
Nothing is registered in a models' or datasets' registry, and the CPU launch patches are
made only where CUDA is not available."""
import json
import os.path as osp
import re
import subprocess
import sys

import pytest

from tests.timeouts import scaled

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
README = osp.join(ROOT, 'README.md')
SECTION = 'What importing it changes'

#: The registries' own names (MMEngine's and mmcv 1.x's) that nothing may be added to.
UNTOUCHED_REGISTRIES = ('model', 'dataset')


def listed_in_readme(path: str = README, section: str = SECTION) -> list:
    """The dotted names that start the bullets of the README's ``section``:
    ``- `mmengine.dist.utils._init_dist_pytorch`: ...`` (one or more, in backticks)."""
    with open(path) as f:
        text = f.read()
    match = re.search(rf'^## {re.escape(section)}\s*$(.*?)(?=^## |\Z)', text, re.M | re.S)
    assert match, f'README.md has no section "## {section}"'
    names = []
    for bullet in re.findall(r'^\s*[-*]\s+((?:`[\w.]+`[\s,/]*(?:and\s+)?)+)', match.group(1),
                             re.M):
        names += re.findall(r'`([\w.]+)`', bullet)
    assert names, f'the README\'s section "{section}" has no bullet that names an object'
    return names


def probe(listed: list) -> dict:
    """tests/import_changes_probe.py's findings, in a fresh process of this Python."""
    run = subprocess.run(
        [sys.executable, '-m', 'tests.import_changes_probe', '--listed',
         json.dumps(dict(readme=listed))],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
        timeout=scaled(300))
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.splitlines()[-1])


def unlisted(changes: list, label: str) -> list:
    return [f"{change['name']} ({change['kind']}{': ' if change['detail'] else ''}"
            f"{change['detail']})" for change in changes if not change['covered_by'][label]]


def registered_in_models_or_datasets(changes: list) -> list:
    return [f"{change['name']} ({change['detail']})" for change in changes
            if change['registry'] in UNTOUCHED_REGISTRIES]


@pytest.fixture(scope='module')
def findings():
    return probe(listed_in_readme())


@pytest.mark.timeout(600)
def test_importing_changes_only_what_the_readme_lists(findings):
    changes = findings['changes']
    # Read the stack's own names in the failure, to update the README's section.
    assert unlisted(changes, 'readme') == [], (
        f'importing mmdet3d_ddp_guard ({findings["frameworks"]}) changes what README.md\'s '
        f'"{SECTION}" does not list; all changes: {[change["name"] for change in changes]}')
    assert unlisted(changes, 'import_changes') == []
    assert registered_in_models_or_datasets(changes) == []
    # What loading a module does (torch._dynamo: environment variables, atexit handlers,
    # operators, torch.manual_seed replaced) happens before the snapshot when the probe
    # loads it first: so the import must load nothing the frameworks had not.
    assert findings['loaded_by_the_import'] == [], (
        'importing mmdet3d_ddp_guard loads modules the frameworks do not: '
        f'{findings["loaded_by_the_import"]}; load them where they are needed')


@pytest.mark.timeout(600)
def test_a_change_that_is_not_listed_is_named(findings):
    """The same comparison, with changes the package does not make applied after the
    import: each is found, by its name, and no list covers it."""
    extra, found = findings['extra_patches'], findings['changes_with_extra_patches']
    atexit_changes = [change for change in found if change['kind'] == 'atexit']
    assert len(atexit_changes) == 1, found
    expected = {f'{extra["function"]} (replaced)', f'{extra["class_attribute"]} (added)',
                f'os.environ (environment: {extra["environment"]})',
                f'atexit (atexit: {atexit_changes[0]["detail"]})'}
    models = [change for change in found if change['registry'] == 'model']
    # Where a framework holds a registry (torch alone has none).
    if 'registration' in extra:
        assert len(models) == 1 and models[0]['detail'] == f'model: {extra["registration"]}'
        expected.add(f'{models[0]["name"]} (registered: model: {extra["registration"]})')
    assert registered_in_models_or_datasets(found) == [
        f'{model["name"]} (model: {extra["registration"]})' for model in models]
    for label in ('readme', 'import_changes'):
        assert set(unlisted(found, label)) - set(unlisted(findings['changes'], label)) \
            == expected


#: Each adapter's import_changes module, and its patch that only a machine without CUDA gets.
CPU_ONLY_PATCHES = [('openmmlab2', 'allow_cpu_init_dist'), ('openmmlab1', 'allow_cpu_training')]


@pytest.mark.parametrize('adapter, cpu_only', CPU_ONLY_PATCHES)
@pytest.mark.parametrize('cuda', [True, False], ids=['cuda', 'no_cuda'])
def test_the_cpu_launch_patch_is_made_only_without_cuda(monkeypatch, adapter, cuda, cpu_only):
    import mmdet3d_ddp_guard
    import_changes = sys.modules.get(f'{mmdet3d_ddp_guard.__name__}.{adapter}.import_changes')
    if import_changes is None:
        pytest.skip(f'{adapter} is not loaded: its framework is not installed')
    made = []
    monkeypatch.setattr(import_changes.torch.cuda, 'is_available', lambda: cuda)
    monkeypatch.setattr(import_changes, cpu_only, lambda: made.append(cpu_only))
    patched = _current(import_changes.CHANGED)
    import_changes.apply()
    assert made == ([] if cuda else [cpu_only])
    assert _current(import_changes.CHANGED) == patched  # made at the import, not again


def _current(names) -> list:
    """What each listed name holds now, by identity (a class's own entry, not a bound
    method, which is new at each lookup)."""
    from tests.import_changes_probe import resolve
    held = []
    for name in names:
        owner, attr = resolve(name)
        held.append(id(owner) if attr is None else id(vars(owner).get(attr)))
    return held
