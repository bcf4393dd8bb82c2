"""How ``check`` reads an mmcv-full 1.x training config: the file through mmcv's ``Config``
(its custom imports done) and the ``--cfg-options`` overrides through its ``DictAction``, as
the training scripts of mmdet 2.x and the BEV codebases read them.

The command imports this module inside its functions only, so that it runs where MMEngine is
the one framework installed.
"""
from mmcv import Config, DictAction

__all__ = ['DictAction', 'load_config']


def load_config(path: str) -> Config:
    """The config at ``path``, read by mmcv's ``Config`` (custom imports done)."""
    return Config.fromfile(path)
