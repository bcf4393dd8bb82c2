"""The package's architecture, read from its imports: a torch-only core and reporting, and
two adapters that each import one framework and never the other's (so that
``import mmdet3d_ddp_guard`` works where only one is installed)."""
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


def _imports(folder):
    """(file, absolute module name) of every import in the folder, lazy ones included."""
    for root, _, names in os.walk(osp.join(PACKAGE, folder)):
        for name in names:
            if not name.endswith('.py'):
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


@pytest.mark.parametrize('folder', ['core', 'reporting'])
def test_core_and_reporting_import_torch_and_themselves_only(folder):
    for path, module in _imports(folder):
        assert module.split('.')[0] not in FRAMEWORKS, (path, module)
        if module.startswith('mmdet3d_ddp_guard'):
            # Arrows run one way: reporting reads core, core reads neither.
            allowed = ('mmdet3d_ddp_guard.core', 'mmdet3d_ddp_guard.version') + (
                ('mmdet3d_ddp_guard.reporting', ) if folder == 'reporting' else ())
            assert module.startswith(allowed), (path, module)


@pytest.mark.parametrize('adapter', sorted(ADAPTERS))
def test_an_adapter_imports_its_framework_and_not_the_other_adapter(adapter):
    other = next(name for name in ADAPTERS if name != adapter)
    for path, module in _imports(adapter):
        assert not module.startswith(f'mmdet3d_ddp_guard.{other}'), (path, module)
        if module.split('.')[0] in FRAMEWORKS:
            assert module.split('.')[0] in ADAPTERS[adapter], (path, module)
        if adapter == 'openmmlab2':
            assert not module.startswith(MMCV1_ONLY), (path, module)


def test_each_stall_guard_module_is_short_and_says_what_it_owns():
    """The stall guard's modules (the thread, the store protocol, the record, the
    judgement, the exit) each stay under 300 lines and open with what they own."""
    folder = osp.join(PACKAGE, 'core', 'stall_guard')
    for name in sorted(os.listdir(folder)):
        if not name.endswith('.py'):
            continue
        with open(osp.join(folder, name)) as file:
            source = file.read()
        assert source.count('\n') < 300, name
        assert ast.get_docstring(ast.parse(source)), name
