"""The adapter for PyTorch Lightning (``lightning.pytorch`` or ``pytorch_lightning``, >= 2.0):
:class:`GuardedDDPStrategy`, in place of Lightning's ``DDPStrategy``.

Imported by name (``from mmdet3d_ddp_guard.lightning import GuardedDDPStrategy``), never by
``import mmdet3d_ddp_guard``: the package loads no trainer. Importing it changes nothing
outside this package. Where both Lightning packages are installed, it serves the one already
imported (import your Trainer first), else ``lightning.pytorch``.
"""
from ..environment.framework_table import LIGHTNING, framework
from ..environment.versions import check_framework
from .lightning_package import lightning_package

check_framework(framework(LIGHTNING), lightning_package())

from .guarded_ddp_strategy import GuardedDDPStrategy  # noqa: E402

__all__ = ['GuardedDDPStrategy']
