"""``CollectiveCountHook``: prints how many collectives the default process group issued
during training (its sequence number), for the collective budget of the mmcv 1.x adapter, and
at the process's exit whether the stall guard's watchdog was stopped at the end of the run."""
import atexit

import torch.distributed as dist
from mmcv.runner import HOOKS, Hook


@HOOKS.register_module(force=True)
class CollectiveCountHook(Hook):

    def before_run(self, runner):
        self._start = self._issued()

    def after_run(self, runner):
        print(f'[collectives] rank={runner.rank} issued={self._issued() - self._start}',
              flush=True)
        watchdog = getattr(runner.model, 'stall_watchdog', None)
        if watchdog is not None:  # read after every after_run hook, the guard's included
            atexit.register(lambda: print(f'[stall guard] rank={runner.rank} '
                                          f'stopped={watchdog.stopped}', flush=True))

    @staticmethod
    def _issued() -> int:
        return dist.distributed_c10d._get_default_group()._get_sequence_number_for_group()
