"""How ``check`` reads an MMEngine training config: the file through MMEngine's ``Config``
(its custom imports done) and the ``--cfg-options`` overrides through its ``DictAction``, as
mmdet3d's ``tools/train.py`` reads them.

The command imports this module inside its functions only, so that it runs where mmcv-full
1.x is the one framework installed.
"""
from mmengine.config import Config, DictAction

__all__ = ['DictAction', 'load_config']


def load_config(path: str) -> Config:
    """The config at ``path``, read by MMEngine's ``Config`` (custom imports done)."""
    return Config.fromfile(path)
