"""Which frameworks are installed, found by what Python would import, without importing them
(``import mmcv`` 1.x is slow, and mmcv 2.x pulls MMEngine): a row's module found on
``sys.path`` and its version read from the module's own files, whichever distribution put it
there (``mmengine``, ``mmengine-lite``, ``onedl-mmengine``), or none (a source tree on
``PYTHONPATH``, a vendored copy)."""
import ast
import importlib.util
import os.path as osp
from dataclasses import dataclass
from importlib import metadata
from typing import Dict, Optional

from ..messages.framework_found import framework_version_unreadable
from .framework_table import FRAMEWORKS
from .version_numbers import major_minor

#: Where a package says its version, in the order tried: ``__version__ = '...'`` in the first
#: two (MMEngine's, mmcv's, torch's; Lightning's reads the third), the first line of the last.
_VERSION_FILES = ('version.py', '__version__.py', 'version.info')


@dataclass(frozen=True)
class FoundFramework:
    """A framework's module as Python would import it: its ``version`` (as the module says
    it) and ``path`` (its package folder)."""
    name: str
    module: str
    version: str
    path: str


def module_path(module: str) -> Optional[str]:
    """The folder (or file) Python would import the top-level ``module`` from; None where it
    is not importable. Imports nothing."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a broken spec, or a module whose __spec__ is None
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    return locations[0] if locations else spec.origin


def _version_assigned(source: str) -> Optional[str]:
    """The string a module's top level assigns to ``__version__`` (annotated or not)."""
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(getattr(target, 'id', None) == '__version__' for target in targets) \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value
    return None


def read_version(path: str) -> Optional[str]:
    """The version a package folder says in its own files (:data:`_VERSION_FILES`), else the
    version of the distribution that installed that folder; None where neither says one."""
    for name in _VERSION_FILES:
        candidate = osp.join(path, name)
        if not osp.isfile(candidate):
            continue
        with open(candidate, encoding='utf-8') as file:
            text = file.read()
        version = (text.strip().splitlines() or [None])[0] if name.endswith('.info') \
            else _version_assigned(text)
        if version:
            return version
    owner = distribution_of(path)
    return owner.version if owner is not None else None


def distribution_of(path: str) -> Optional[metadata.Distribution]:
    """The installed distribution whose files hold the package folder ``path``; None for a
    folder no distribution installed (a source tree on ``PYTHONPATH``). Reads every
    distribution's file list: for reports, not at import."""
    path = osp.realpath(path)
    init = osp.join(path, '__init__.py')
    for distribution in metadata.distributions():
        for file in distribution.files or ():
            if file.name == '__init__.py' and \
                    osp.realpath(str(distribution.locate_file(file))) == init:
                return distribution
    return None


def found_frameworks() -> Dict[str, FoundFramework]:
    """The table's frameworks whose module Python would import, in the table's order (a
    row's ``modules``, in order, each below its version bound where it has one). Raises
    ImportError, naming the module's path and the fix, where a framework the package loads
    is importable but says no version."""
    found = {}
    for row in FRAMEWORKS:
        for module, below in row.modules:
            path = module_path(module)
            if path is None:
                continue
            version = read_version(path)
            if version is None:
                if row.imported_by_the_package:
                    raise ImportError(framework_version_unreadable(module, path,
                                                                   row.to_install))
                continue
            if below is None or major_minor(version) < below:
                found[row.name] = FoundFramework(row.name, module, version, path)
                break
    return found


def installed_frameworks() -> Dict[str, str]:
    """``{name: version}`` of :func:`found_frameworks`. Raises ImportError, naming them,
    when none is."""
    found = {name: framework.version for name, framework in found_frameworks().items()}
    if not found:
        raise ImportError(
            'mmdet3d_ddp_guard guards the DDP of an OpenMMLab training, and none of its '
            'frameworks is installed: install '
            + ', or '.join(row.to_install for row in FRAMEWORKS) + '.')
    return found
