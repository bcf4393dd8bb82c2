"""A plain loop's report: which parameters each rank left unused, in which iteration, in the
log and in the files that ``python -m mmdet3d_ddp_guard summarize`` reads."""
import atexit
import logging
import time
import weakref
from typing import List, Optional

import torch
import torch.distributed as dist

from ..environment.framework_table import PYTORCH_LINES
from ..guard.iteration_usage import IterationUsage
from ..reporting.report import UsageReport
from ..reporting.report_options import ReportOptions
from .guarded_ddp import GuardedDDP
from .loop_log import log_from_rank


class _LoopLogger:
    """What :class:`UsageReport` logs with (``info``, ``warning``), on the loop's log."""

    @staticmethod
    def info(message: str) -> None:
        log_from_rank(message, logging.INFO)

    @staticmethod
    def warning(message: str) -> None:
        log_from_rank(message, logging.WARNING)


class UnusedParamsReport(ReportOptions):
    """Reports, for a :class:`~.guarded_ddp.GuardedDDP` in your own loop, which parameters
    went unused in every training iteration, on every rank: one line of your code, after the
    wrapper is built::

        model = GuardedDDP(model)
        report = UnusedParamsReport(model, out_dir='work_dirs/run1', interval=50)

    An iteration is one forward with gradients enabled and its backward (with ``no_sync``
    accumulation, every micro-step); forwards under ``torch.no_grad()`` are not counted.

    - The names, grouped by module and split into "on every rank" and "on some ranks
      (which)", are logged when the unused set first appears or changes, and every
      ``interval`` iterations while it is not empty.
    - In ``out_dir`` (written by global rank 0): ``unused_params_table.json`` (id -> name,
      shape, numel, module type), ``unused_params.jsonl`` (one line per iteration: iteration,
      ``epoch`` and the unused ids of every rank) and, at :meth:`finish`, the summary
      (``unused_params_summary.txt`` / ``.json``: per parameter how often and on which ranks;
      would plain DDP have failed, first where; the setting that fits) and a PNG.

    It reads the wrapper's own usage record: one set of autograd hooks, and the per-rank
    detail rides DDP's last gradient bucket (modes ``'auto'`` and ``False``), so it adds no
    collective; under ``find_unused_parameters=True`` the ranks gather their masks in one
    ``all_gather`` every ``interval`` iterations. It takes what the wrapper resolved at the
    start of each step (a forward pre-hook on the wrapper), so that a strict stop is raised
    after its iteration is in the file.

    Call :meth:`finish` on every rank after the last step for the last iteration and the
    summary files (it gathers across ranks). Without it the summary is written when the
    process exits (rank 0, from what was resolved by then, no collective), and
    ``python -m mmdet3d_ddp_guard summarize OUT_DIR`` rebuilds it from the files of a run
    that died.

    Args:
        model (GuardedDDP): The guarded wrapper of your loop.
        out_dir (str): Where the files go.
        interval (int): Log the names every ``interval`` iterations while some are unused
            (and, under the graph search, gather the masks). Defaults to 50.
        max_modules_in_log (int): Modules listed per group in a log message. Defaults to 12.
        plot (bool): Write the PNG at :meth:`finish` (needs matplotlib). Defaults to True.
        file_prefix (str): Prefix of the files. Defaults to ``'unused_params'``.

    Attributes:
        epoch (int): Written on each line of the per-iteration file; set it in your loop
            if you count epochs (``report.epoch = epoch``). Defaults to 0.
    """

    def __init__(self, model, out_dir: str, interval: int = 50, max_modules_in_log: int = 12,
                 plot: bool = True, file_prefix: str = 'unused_params'):
        if not isinstance(model, GuardedDDP):
            raise TypeError(
                'UnusedParamsReport: model must be the GuardedDDP of your loop '
                '(from mmdet3d_ddp_guard.pytorch import GuardedDDP; model = GuardedDDP(model)), '
                f'not {type(model).__name__}.')
        if not isinstance(out_dir, str) or not out_dir:
            raise ValueError(f'UnusedParamsReport: out_dir must name a folder, not '
                             f'{out_dir!r}; e.g. out_dir=\'work_dirs/run1\'.')
        super().__init__(interval=interval, out_dir=out_dir,
                         max_modules_in_log=max_modules_in_log, plot=plot,
                         file_prefix=file_prefix)
        self.epoch = 0
        self._steps = 0
        self._finished = False
        main_process = not dist.is_initialized() or dist.get_rank() == 0
        self.start_report(model, model.module, True, out_dir, _LoopLogger(), main_process,
                          PYTORCH_LINES)
        # A loop has no resume of its own for the report: an earlier run's (or a restarted
        # worker's earlier attempt's) file is kept beside the new one, not emptied.
        if main_process:
            kept = self.report.history.set_aside(time.strftime('before-%Y%m%d-%H%M%S'))
            if kept:
                log_from_rank(f'UnusedParamsReport: {out_dir} held an earlier run\'s '
                              f'per-iteration file; it is now {kept}.', logging.WARNING)
        self.report.prepare_out_dir(fresh=True)
        self._model = weakref.proxy(model)
        self._handle = model.register_forward_pre_hook(self._before_forward)
        # A loop that never calls finish() still gets its summary (rank 0, no collective).
        atexit.register(_summary_at_exit, weakref.ref(self))

    def _before_forward(self, model, inputs) -> None:
        if not torch.is_grad_enabled() or self._finished:
            return
        # Every rank counts the same steps, so the gather of the graph search comes alike.
        exchange = self._steps > 0 and self._steps % self.interval == 0
        self._steps += 1
        self.report.collect(exchange, self.epoch)

    def finish(self) -> List[IterationUsage]:
        """After the last step, on every rank: the iterations not reported yet, gathered
        across ranks, then the summary (logged, and written by rank 0); returns the
        iterations it reported. Later forwards are not reported."""
        self._finished = True
        self._handle.remove()
        reported = self.report.finish(self.epoch)
        for revision in self._model.take_revisions():  # what the last exchange revised
            log_from_rank(revision)
        return reported


def _summary_at_exit(report_ref) -> None:
    report: Optional[UnusedParamsReport] = report_ref()
    if report is not None and not report._finished:
        report.report.write_summary()
