"""Which of Lightning's two packages the adapter serves: ``lightning.pytorch`` (the unified
``lightning`` distribution) or ``pytorch_lightning``. They hold the same code as different
classes, and a Trainer takes only a strategy of its own package: the one already imported
wins (a user imports their Trainer before the strategy), else the first installed, in that
order."""
import importlib
import importlib.util
import sys
from types import ModuleType

_PACKAGES = ('lightning.pytorch', 'pytorch_lightning')


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # the parent of a dotted name is missing
        return False


def lightning_package() -> ModuleType:
    """The Lightning package whose ``DDPStrategy`` the adapter subclasses."""
    for name in _PACKAGES:
        if name in sys.modules:
            return sys.modules[name]
    for name in _PACKAGES:
        if _installed(name):
            return importlib.import_module(name)
    raise ImportError('mmdet3d_ddp_guard.lightning needs PyTorch Lightning, and neither '
                      "lightning.pytorch nor pytorch_lightning is installed: pip install "
                      "'lightning>=2.0'.")
