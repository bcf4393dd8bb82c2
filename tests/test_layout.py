"""The package's architecture, read from its imports: one folder per concern, the
framework-free ones importing torch and each other only, and two adapters that each import
one framework and never the other's (so that ``import mmdet3d_ddp_guard`` works where only one
is installed). Every module opens with the concern it holds."""
import ast
import os
import os.path as osp

import pytest

import mmdet3d_ddp_guard

PACKAGE = osp.dirname(mmdet3d_ddp_guard.__file__)
FRAMEWORKS = ('mmengine', 'mmcv', 'mmdet', 'mmdet3d', 'mmseg')
# The framework each adapter binds to; mmdet/mmdet3d are read lazily, where a config needs them.
ADAPTERS = {
    'openmmlab2': ('mmengine', 'mmcv', 'mmdet', 'mmdet3d'),
    'openmmlab1': ('mmcv', 'mmdet', 'mmdet3d'),
}
MMCV1_ONLY = ('mmcv.parallel', 'mmcv.runner', 'mmcv.utils')
# What each framework-free folder may read of the package: the arrows run one way, from the
# product's use (reports, the rank simulation) down to the mechanism and the environment.
READS = {
    'environment': ('environment', 'messages'),
    'messages': ('environment', 'messages'),
    'guard': ('environment', 'messages', 'guard', 'stall_guard'),
    'stall_guard': ('environment', 'messages', 'stall_guard'),
    'reporting': ('environment', 'messages', 'guard', 'reporting'),
    'rank_simulation': ('environment', 'messages', 'guard', 'reporting', 'rank_simulation'),
}


def _imports(folder, names=None):
    """(file, absolute module name) of every import in the folder, lazy ones included."""
    for root, _, files in os.walk(osp.join(PACKAGE, folder)):
        for name in files:
            if not name.endswith('.py') or (names is not None and name not in names):
                continue
            path = osp.join(root, name)
            package = osp.relpath(root, osp.dirname(PACKAGE)).split(os.sep)
            with open(path) as source:
                tree = ast.parse(source.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        yield path, alias.name
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = package[:len(package) - node.level + 1]
                        yield path, '.'.join(base + ([node.module] if node.module else []))
                    else:
                        yield path, node.module


def test_every_folder_of_the_package_is_a_concern_named_here():
    folders = {name for name in os.listdir(PACKAGE)
               if osp.isfile(osp.join(PACKAGE, name, '__init__.py'))}
    assert folders == set(READS) | set(ADAPTERS) | {'cli'}


@pytest.mark.parametrize('folder', sorted(READS))
def test_framework_free_folders_import_torch_and_what_they_may_read(folder):
    for path, module in _imports(folder):
        assert module.split('.')[0] not in FRAMEWORKS, (path, module)
        if module.startswith('mmdet3d_ddp_guard.'):
            assert module.split('.')[1] in READS[folder] + ('version', ), (path, module)


@pytest.mark.parametrize('adapter', sorted(ADAPTERS))
def test_an_adapter_imports_its_framework_and_not_the_other_adapter(adapter):
    other = next(name for name in ADAPTERS if name != adapter)
    for path, module in _imports(adapter):
        assert not module.startswith(f'mmdet3d_ddp_guard.{other}'), (path, module)
        if module.split('.')[0] in FRAMEWORKS:
            assert module.split('.')[0] in ADAPTERS[adapter], (path, module)
        if adapter == 'openmmlab2':
            assert not module.startswith(MMCV1_ONLY), (path, module)


def test_each_stall_guard_module_is_short():
    """The stall guard's modules (the thread, the store protocol, the record, the
    judgement, the exit) each stay under 300 lines."""
    folder = osp.join(PACKAGE, 'stall_guard')
    for name in sorted(os.listdir(folder)):
        if not name.endswith('.py'):
            continue
        with open(osp.join(folder, name)) as file:
            assert file.read().count('\n') < 300, name


def test_every_module_opens_with_what_it_owns():
    """Each module holds one concern and its docstring names it, so a reader finds where a
    thing lives from the first lines of each file, ``__init__`` and ``version`` included."""
    for root, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if not name.endswith('.py'):
                continue
            path = osp.join(root, name)
            with open(path) as file:
                assert ast.get_docstring(ast.parse(file.read())), osp.relpath(path, PACKAGE)
