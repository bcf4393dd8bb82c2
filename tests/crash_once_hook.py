"""A hook that kills one rank once, to test torchrun's restart with ``--resume``.

Imported by the training processes through ``custom_imports`` (the tests put the repository
root on their PYTHONPATH).
"""
import os

from mmengine.hooks import Hook
from mmengine.registry import HOOKS

CRASH_MESSAGE = 'CrashOnceHook: deliberate crash'


@HOOKS.register_module()
class CrashOnceHook(Hook):
    """Raises on rank ``rank`` before iteration ``at_iter``, in torchrun's first attempt only
    (``TORCHELASTIC_RESTART_COUNT`` is 0), so that the restarted workers train through.

    Args:
        at_iter (int): The runner iteration (0-based) that does not start.
        rank (int): The rank that crashes. Defaults to 1.
    """

    def __init__(self, at_iter: int, rank: int = 1):
        self.at_iter = at_iter
        self.rank = rank

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        if (runner.iter == self.at_iter and runner.rank == self.rank
                and os.environ.get('TORCHELASTIC_RESTART_COUNT') == '0'):
            raise RuntimeError(f'{CRASH_MESSAGE} of rank {self.rank} before iteration '
                               f'{self.at_iter}')
