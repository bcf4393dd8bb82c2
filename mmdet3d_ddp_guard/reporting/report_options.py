"""How both :class:`UnusedParamsHook` classes start: their options and their ``before_run``.

:class:`ReportOptions` is the hooks' shared base: the options they take, checked, and
:meth:`~ReportOptions.start_report`, their ``before_run``: which usage record to read (the
guarded wrapper's, or one of the hook's own), the :class:`~.report.UsageReport` over it,
and whether that report must stop the run itself (:func:`plain_ddp_fast_path`).
"""
from typing import Optional

from torch.nn.parallel import DistributedDataParallel

from ..guard.usage_record import ParamUsageRecord
from ..messages.config_lines import ConfigLines
from .report import UsageReport

#: The hook's options, named in its errors.
OPTIONS = ('interval', 'out_dir', 'max_modules_in_log', 'plot', 'file_prefix')


class ReportOptions:
    """The options both ``UnusedParamsHook`` classes take (their docstrings explain them),
    checked, and what a hook holds before its run starts: the usage record and the
    :class:`UsageReport`, set in ``before_run``."""

    def __init__(self,
                 interval: int = 50,
                 out_dir: Optional[str] = None,
                 max_modules_in_log: int = 12,
                 plot: bool = True,
                 file_prefix: str = 'unused_params',
                 **unknown):
        if unknown:
            raise TypeError(
                f'UnusedParamsHook: unknown option(s) {sorted(unknown)}; the options are '
                f'{", ".join(OPTIONS)}.')
        for name, value in (('interval', interval),
                            ('max_modules_in_log', max_modules_in_log)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f'UnusedParamsHook: {name} must be a positive integer, not '
                                 f'{value!r}; e.g. {name}=50.')
        self.interval = interval
        self.out_dir = out_dir
        self.max_modules_in_log = max_modules_in_log
        self.plot = plot
        self.file_prefix = file_prefix
        self.record: Optional[ParamUsageRecord] = None
        self.report: Optional[UsageReport] = None

    def start_report(self, model, module, guarded: bool, work_dir: str, logger,
                     main_process: bool, lines: ConfigLines) -> None:
        """What both hooks' ``before_run`` do: the record (the guarded wrapper's own, one
        set of autograd hooks, whose resolved iterations the wrapper now keeps for the
        report; else one of the hook's own on ``module``), the report, and its summary as
        the stall guard's exit callback.

        Args:
            model: The runner's model (a wrapper, or the module itself).
            module (nn.Module): The model inside the wrapper.
            guarded (bool): Whether ``model`` is this framework's guarded wrapper.
            work_dir (str): Where the files go unless ``out_dir`` was given.
            logger: The runner's logger.
            main_process (bool): Whether this process writes the files.
            lines (ConfigLines): See :class:`UsageReport`.
        """
        self.record = model.usage_record if guarded else ParamUsageRecord(module)
        self.out_dir = self.out_dir or work_dir
        self.report = UsageReport(
            self.record, self.out_dir, logger, self.file_prefix, self.interval,
            self.max_modules_in_log, self.plot, main_process=main_process,
            guarded_wrapper=model if guarded else None,
            stops_unreached=not guarded and plain_ddp_fast_path(model),
            lines=lines)
        if guarded and model.stall_watchdog is not None:
            # A stall that ends the run leaves through os._exit: no after_train / after_run.
            model.stall_watchdog.add_exit_callback(self.report.write_summary)
        if guarded:
            model.keep_resolved_for_report()


def plain_ddp_fast_path(model) -> bool:
    """Whether ``model`` is torch's DDP (or a subclass) on its fast path, where an unreached
    parameter dooms the run and a gather across ranks would hang behind DDP's unfinished
    all-reduce."""
    return (isinstance(model, DistributedDataParallel) and not model.find_unused_parameters
            and not getattr(model, 'static_graph', False))
