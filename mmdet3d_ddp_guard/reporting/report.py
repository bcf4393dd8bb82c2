"""What a report (MMEngine's and mmcv 1.x's :class:`UnusedParamsHook`, a plain loop's
``UnusedParamsReport``) does with a usage record, whatever the framework.

Both hooks (MMEngine's in :mod:`mmdet3d_ddp_guard.openmmlab2.hooks.unused_params_hook`,
mmcv 1.x's in :mod:`mmdet3d_ddp_guard.openmmlab1.unused_params_hook`) compose one
:class:`UsageReport` (set up by :class:`~.report_options.ReportOptions`, their shared base);
they only find the record, call it at their runner's hook points and carry ``unused_params``
to their log line and the statistics to their checkpoints. Files, messages and the checkpoint
state are therefore the same under both frameworks, and
``python -m mmdet3d_ddp_guard summarize WORK_DIR`` reads either run.
"""
import os
import textwrap
from typing import Dict, List, Optional, Sequence

from ..guard.errors import unused_parameters_error
from ..guard.iteration_usage import IterationUsage, ResolvedIteration
from ..guard.usage_record import ParamUsageRecord
from ..messages.config_lines import ConfigLines
from ..messages.parameter_text import grouped_lines
from .history_file import HistoryFile, history_path, read_history, table_path, write_table
from .summary import summary_dict, summary_text, write_summary

#: The checkpoint's ``meta`` key of the statistics (``UsageStatistics.state_dict``).
CHECKPOINT_KEY = 'unused_params'


class UsageReport:
    """The logging, files, summary and checkpoint state of :class:`UnusedParamsHook`.

    Read the MMEngine hook's docstring for what is logged and written; this class does it
    for a hook that tells it when iterations start and end. It imports no framework.

    Args:
        record (ParamUsageRecord): The record to read (the wrapper's, or one of its own).
        out_dir (str): Where the files go.
        logger (logging.Logger): Anything with ``info`` and ``warning``; the runner's.
        prefix (str): Prefix of the files. Defaults to ``'unused_params'``.
        interval (int): Log the names every ``interval`` iterations while some are unused.
        max_modules_in_log (int): Modules listed per group in a log message.
        plot (bool): Write the PNG (needs matplotlib).
        main_process (bool): Whether this process writes the files (global rank 0); the
            others only log. Defaults to True.
        guarded_wrapper (GuardedWrapper, optional): The guarded wrapper whose record this
            is: it starts, ends and resolves the iterations, and hands the resolved ones
            over when the report asks (:meth:`GuardedWrapper.resolved_for_report`). None
            when the report owns ``record`` (no guarded wrapper) and so drives it itself.
        stops_unreached (bool): Stop with :class:`UnusedParametersError` when this rank
            left parameters unreached (the hook's own record under plain DDP's fast path,
            see :func:`~.report_options.plain_ddp_fast_path`). Defaults to False.
        lines (ConfigLines): The framework's words, for the summary's recommended line
            and the stop's fix.
    """

    def __init__(self,
                 record: ParamUsageRecord,
                 out_dir: str,
                 logger,
                 prefix: str = 'unused_params',
                 interval: int = 50,
                 max_modules_in_log: int = 12,
                 plot: bool = True,
                 main_process: bool = True,
                 guarded_wrapper=None,
                 stops_unreached: bool = False,
                 *,
                 lines: ConfigLines):
        self.record = record
        self.out_dir = out_dir
        self.logger = logger
        self.prefix = prefix
        self.interval = interval
        self.max_modules_in_log = max_modules_in_log
        self.plot = plot
        self.main_process = main_process
        self.guarded_wrapper = guarded_wrapper
        self.stops_unreached = stops_unreached
        self.lines = lines
        self.history = HistoryFile(history_path(out_dir, prefix), logger)

    @property
    def drives_record(self) -> bool:
        """Whether the report owns its record, and so starts and ends its iterations."""
        return self.guarded_wrapper is None

    # -- the run's start ----------------------------------------------------------------

    def prepare_out_dir(self, fresh: bool) -> None:
        """Writes the table and starts the per-iteration file (emptied when ``fresh``); an
        out_dir that cannot be written is the one error (a configuration mistake)."""
        if not self.main_process:
            return
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            write_table(table_path(self.out_dir, self.prefix),
                        [self.record.table.describe(i) for i in range(len(self.record.table))])
            self.history.start(fresh=fresh)
        except OSError as error:
            raise OSError(f'{self.lines.report}: cannot write to out_dir={self.out_dir!r} '
                          f'({error.strerror}); pass a writable out_dir, or fix the work '
                          'dir\'s permissions.') from error

    def state_dict(self) -> Dict:
        """What a checkpoint keeps under ``meta[CHECKPOINT_KEY]``."""
        return self.record.statistics.state_dict()

    def restore(self, state: Optional[Dict], resumed_iter: int, resumed: bool = True) -> None:
        """After a checkpoint was loaded: ``state`` is its ``meta[CHECKPOINT_KEY]`` (None
        when absent), ``resumed_iter`` the iteration the run goes on at; a ``load_from``
        (``resumed=False``) starts new counts."""
        if not resumed:
            if state is not None:
                self.logger.info(f'{self.lines.report}: load_from starts a new run from the '
                                 "checkpoint's weights; its unused-parameter statistics are "
                                 'not carried over.')
            return
        num_params = len(self.record.table)
        if state is not None and state['num_params'] != num_params:
            # A layer added, removed, frozen or unfrozen since the checkpoint: the old counts
            # and the file's ids belong to another parameter table.
            self.logger.warning(
                f'{self.lines.report}: the checkpoint\'s statistics count {state["num_params"]} '
                f'trainable parameters but this model has {num_params}; the statistics start '
                f'fresh at iteration {resumed_iter}, so the summary covers the resumed part '
                f'only.{self._set_history_aside(resumed_iter)}')
            return
        if state is None:
            self.logger.warning(f'{self.lines.report}: the checkpoint holds no unused-parameter '
                                'statistics; the summary covers the resumed part only.')
        else:
            self.record.statistics.load_state_dict(state)
        if self.main_process:
            self.history.keep_before(resumed_iter)

    def _set_history_aside(self, resumed_iter: int) -> str:
        if not self.main_process:
            return ''
        moved = self.history.set_aside(f'before-iter{resumed_iter}')
        return f' The earlier per-iteration file is now {moved}.' if moved else ''

    # -- every iteration ----------------------------------------------------------------

    def start_iteration(self) -> None:
        if self.drives_record:
            self.record.start_iteration()

    def end_iteration(self, iteration: int, exchange: bool, epoch: int) -> List[IterationUsage]:
        """After the iteration's backward and optimizer step: ends it on this rank (an own
        record), then :meth:`collect` s."""
        if self.stops_unreached:
            unreached = self.record.local_unreached()
            if unreached:
                raise unused_parameters_error(
                    self.record.table, {self.record.rank: unreached}, iteration,
                    f'the config: plain DDP ({self.lines.report} cannot report across ranks '
                    'here)', self.lines)
        ended = self.record.end_local_iteration(iteration) if self.drives_record else []
        return self.collect(exchange, epoch, ended)

    def collect(self, exchange: bool, epoch: int,
                resolved: Sequence[ResolvedIteration] = ()) -> List[IterationUsage]:
        """Asks for the iterations resolved since the last call (with ``exchange``, the open
        ones gathered across ranks first: every rank must pass the same), reports each, and
        returns them for the hook's log line. The guard's strict stop, when one of them
        made it, is raised after they are reported: the file holds the iteration that
        stopped the run."""
        resolved, stop = list(resolved), None
        if self.guarded_wrapper is not None:
            taken, stop = self.guarded_wrapper.resolved_for_report(exchange)
            resolved += taken
        elif exchange:
            resolved += self.record.exchange()
        for usage, changed in resolved:
            self.report(usage, changed, epoch)
        if stop is not None:
            raise stop
        return [usage for usage, _ in resolved]

    def report(self, usage: IterationUsage, changed: bool, epoch: int) -> None:
        """One resolved iteration: the names when due, the line in the file."""
        if usage.unused_on_any_rank and (changed
                                         or self.record.statistics.iterations_with_unused == 1
                                         or (usage.iteration + 1) % self.interval == 0):
            self.logger.info(self.describe(usage, changed))
        self.append_line(usage, epoch)

    def describe(self, usage: IterationUsage, changed: bool) -> str:
        """The log message naming an iteration's unused parameters, grouped by module and
        by the ranks that left them unused."""
        table, limit = self.record.table, self.max_modules_in_log
        everywhere = usage.unused_on_all_ranks
        lines = [f'{self.lines.report}: iteration {usage.iteration}: '
                 f'{len(usage.unused_on_any_rank)} parameters unused'
                 + ('' if len(usage.per_rank_unused) == 1 else
                    f' ({len(everywhere)} on every rank)')
                 + (' (changed since the previous iteration)' if changed else '')]
        if everywhere:
            if len(usage.per_rank_unused) > 1:
                lines.append('  on every rank:')
            lines += [f'    {line}' for line in grouped_lines(table, everywhere, limit)]
        by_ranks: Dict[tuple, List[int]] = {}
        for index in sorted(usage.unused_on_any_rank - everywhere):
            by_ranks.setdefault(tuple(usage.ranks_of(index)), []).append(index)
        for ranks, ids in by_ranks.items():
            lines.append(f'  only on rank(s) {",".join(map(str, ranks))}:')
            lines += [f'    {line}' for line in grouped_lines(table, ids, limit)]
        return '\n'.join(lines)

    @staticmethod
    def history_line(usage: IterationUsage, epoch: int) -> Dict:
        """The per-iteration file's line of ``usage`` (see :mod:`.history_file`)."""
        line = dict(iter=usage.iteration, epoch=epoch,
                    unused_per_rank=[list(ids) for ids in usage.per_rank_unused])
        if usage.ranks_left_unreached:
            line['ranks_left_unreached'] = usage.ranks_left_unreached
        return line

    def append_line(self, usage: IterationUsage, epoch: int) -> None:
        if self.main_process:
            self.history.append(self.history_line(usage, epoch))

    # -- the run's end ------------------------------------------------------------------

    def finish(self, epoch: int) -> List[IterationUsage]:
        """After training: the last iterations resolved and exchanged (on every rank) and
        reported, then the summary; returns them."""
        last = self.collect(True, epoch)
        self.write_summary()
        return last

    def write_summary(self) -> None:
        """Logs the summary and writes its files (main process); a file that cannot be
        written is a warning (the summary is in the log, and ``summarize`` rebuilds the
        files). Also what a stall that ends the run calls before it exits."""
        if not self.main_process:
            return
        if not self.history.flush():
            self.logger.warning(
                f'{self.lines.report}: iterations {self.history.pending_iterations[0]}-'
                f'{self.history.pending_iterations[-1]} could not be written to '
                f'{self.history.path}; the summary below counts them.')
        table = self.record.table
        summary = summary_dict(table, self.record.statistics, self.record.world_size,
                               self.lines.guard)
        try:
            history = read_history(self.history.path, self.logger, len(table))
        except OSError as error:
            self.logger.warning(f'{self.lines.report}: cannot read {self.history.path} '
                                f'({error.strerror or error}); the PNG is not drawn.')
            history = []
        try:
            paths = write_summary(self.out_dir, self.prefix, summary, table, history,
                                  self.plot)
            files = 'Files: ' + ', '.join(paths.values())
        except OSError as error:
            files = (f'The summary files could not be written in {self.out_dir} '
                     f'({error.strerror or error}); once it is writable, '
                     f'`python -m mmdet3d_ddp_guard summarize {self.out_dir}` rebuilds them.')
            self.logger.warning(f'{self.lines.report}: {files}')
        except ImportError as error:
            files = (f'No PNG: {error}. Install matplotlib, or pass plot=False; the text and '
                     'JSON summary files are written.')
            self.logger.warning(f'{self.lines.report}: {files}')
        # Indented (blank lines too) like every multi-line message of this package, so log
        # filters that keep a record's indented lines keep all of it.
        self.logger.info(f'{self.lines.report} summary\n' + textwrap.indent(
            summary_text(summary) + '\n' + files, '  ', lambda line: True))
