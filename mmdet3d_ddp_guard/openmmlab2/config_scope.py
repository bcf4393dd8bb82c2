"""Lets MMEngine read ``mmdet3d_ddp_guard::`` config paths, as it reads ``mmdet3d::`` ones.

MMEngine resolves ``_base_ = ['PACKAGE::path/to/config.py']`` only for the packages in its
``MODULE2PACKAGE`` table (OpenMMLab's own), and it reads a config's ``_base_`` before the
config's ``custom_imports`` run, so this package's own import comes too late to name itself
there. A regular install therefore puts a one-line ``.pth`` file into site-packages (see
``setup.py``) that runs a copy of this module at interpreter start. :func:`install` adds
only a finder: when ``mmengine.config.utils`` is imported, this package joins that table.
Nothing of torch or MMEngine is imported at start-up. Importing ``mmdet3d_ddp_guard`` calls
:func:`install` too.

MMEngine then finds the files under ``mmdet3d_ddp_guard/.mim/configs`` in the installed
package (copied there from the repository's ``configs/`` when the wheel is built), and gives
the dicts of such a base ``_scope_='mmdet3d_ddp_guard'``: see :mod:`.registry`.

Must stay importable on its own (no imports from this package, none of torch or MMEngine).
"""
import sys
from importlib.machinery import PathFinder

PACKAGE = 'mmdet3d_ddp_guard'
CONFIG_UTILS = 'mmengine.config.utils'


def register(config_utils) -> None:
    """Adds this package to MMEngine's table of packages whose configs it can load."""
    config_utils.MODULE2PACKAGE.setdefault(PACKAGE, PACKAGE)


class RegisterWhenImported:
    """A meta path finder that registers this package as MMEngine's config utils load."""

    #: The start-up copy and the package's copy of this module each define this class, so
    #: an installed finder is recognised by this marker, not by isinstance.
    registers_mmdet3d_ddp_guard_configs = True

    def find_spec(self, fullname, path=None, target=None):
        if fullname != CONFIG_UTILS:
            return None
        sys.meta_path.remove(self)
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def load_then_register(module):
            load(module)
            register(module)

        spec.loader.exec_module = load_then_register
        return spec


def install() -> None:
    """Registers now if MMEngine's config utils are loaded, else when they are."""
    if CONFIG_UTILS in sys.modules:
        register(sys.modules[CONFIG_UTILS])
    elif not any(getattr(finder, 'registers_mmdet3d_ddp_guard_configs', False)
                 for finder in sys.meta_path):
        sys.meta_path.insert(0, RegisterWhenImported())
