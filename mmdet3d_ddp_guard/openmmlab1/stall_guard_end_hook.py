from mmcv.runner import HOOKS, Hook


@HOOKS.register_module()
class StallGuardEndHook(Hook):
    """Stops the stall guard's watchdog when mmcv's runner ends the run.

    mmcv 1.x's runners have no phase hooks that the guarded wrapper could use, and nothing
    else tells it that training is over: without this hook the watchdog would go on after
    ``runner.run`` returns, and judge the rest of the script (an evaluation, a test) as a
    stall. The guarded ``MMDistributedDataParallel`` registers it on the runner that first
    calls its ``train_step``; there is nothing to configure.

    Args:
        watchdog (StallWatchdog): The wrapper's watchdog.
    """

    def __init__(self, watchdog):
        self.watchdog = watchdog

    def after_run(self, runner) -> None:
        self.watchdog.stop()
