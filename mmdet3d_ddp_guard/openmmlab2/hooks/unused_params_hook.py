import os
import textwrap
from typing import Dict, List, Optional

import torch
from mmengine.dist import master_only
from mmengine.hooks import CheckpointHook, Hook, LoggerHook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS
from torch.nn.parallel import DistributedDataParallel

from ...core.decision_policy import ACCUMULATION_BUG_UNGUARDED, configured_accumulation
from ...core.errors import unused_parameters_error
from ...core.usage_record import IterationUsage, ParamUsageRecord
from ...core.versions import graph_search_accumulates_right
from ...reporting.usage_history import (HistoryFile, history_path, read_history, table_path,
                                        write_table)
from ...reporting.usage_summary import summary_dict, summary_text, write_summary
from ..guarded_ddp import GuardedDDP

CHECKPOINT_KEY = 'unused_params'


@HOOKS.register_module()
class UnusedParamsHook(Hook):
    """Reports which parameters went unused in every training iteration, on every rank.

    A parameter is unused in an iteration on a rank when autograd did not reach it in that
    iteration's backward there (a gradient that exists and is zero is used). With gradient
    accumulation every micro-step is an iteration, as in MMEngine's counter.

    - The log line of every iteration gets ``unused_params``: how many parameters were
      unused on at least one rank.
    - The names, grouped by module and split into "on every rank" and "on some ranks (which)",
      are logged when the unused set first appears or changes, and every ``interval``
      iterations while it is not empty.
    - In ``out_dir``: ``unused_params_table.json`` (id -> name, shape, numel, module type,
      written once), ``unused_params.jsonl`` (one line per iteration: iteration, epoch and
      the unused ids of every rank) and, after training, ``unused_params_summary.txt`` /
      ``.json`` (per parameter: iterations unused / seen, ranks; and a verdict: would plain
      DDP have failed, first at which iteration, and the setting that fits this model) and a
      PNG: per rank, how often each module that was ever unused went unused, over the
      iterations.
    - The accumulated counts are saved in checkpoints and restored on resume, so a resumed
      run's summary covers the whole run; the per-iteration file drops the lines written
      after the checkpoint, so it holds every iteration once. Counts of a model with another
      number of trainable parameters (a layer added or unfrozen since the checkpoint) are
      not restored: a warning, and the counts start fresh. ``load_from`` starts new counts.

    The hook never stops training for its files (see
    :mod:`mmdet3d_ddp_guard.reporting.usage_history`):
    lines are appended whole, torn or garbled lines left by a crash are dropped with a
    warning, and a write that fails (disk full, out_dir gone) is logged once and retried at
    later iterations; the summary is always logged, and
    ``python -m mmdet3d_ddp_guard summarize WORK_DIR`` rebuilds its files from a run that
    died. Only an out_dir that cannot be written at the start is an error.

    Under :class:`GuardedDDP` the hook reads the wrapper's own usage record (one set of
    autograd hooks), whose per-rank detail rides DDP's last gradient bucket: the hook adds no
    collective and no measurable cost. Under any other wrapper it installs the record
    itself, and the ranks exchange their per-iteration masks in one ``all_gather`` per batch
    of iterations: at every log line of ``LoggerHook``, before every checkpoint, at the end
    of each epoch and of training. Nothing is lost (every iteration of every rank is in the
    files and the checkpointed counts); the log line's ``unused_params`` is exact for every
    logged window, and the names are logged when the exchange brings them. In a single
    process the record predicts whether multi-GPU training with plain DDP would fail.
    Under plain DDP with ``find_unused_parameters=False`` a parameter that autograd did not
    reach dooms the run (DDP fails at the next forward, or hangs the ranks that used it),
    and gathering across ranks would itself hang behind DDP's unfinished all-reduce: there
    the hook stops the run with :class:`UnusedParametersError` on the rank that left
    parameters unreached, naming them. Undefined gradients (a custom autograd Function that
    returned None) do not stop plain DDP, which reduces them as zeros: they are reported
    and exchanged as under any other wrapper.
    Cost: under GuardedDDP none of its own; otherwise a hook call per parameter per backward
    and one ``all_gather`` of ``iterations x (parameters + 1)`` bytes per log interval.

    Args:
        interval (int): Log the names every ``interval`` iterations while some are unused.
            Defaults to 50.
        out_dir (str, optional): Where the files go. Defaults to the runner's ``work_dir``
            (stable across resumes).
        max_modules_in_log (int): Modules listed per group in a log message before the rest
            is summarised. Defaults to 12.
        plot (bool): Write the PNG (needs matplotlib). Defaults to True.
        file_prefix (str): Prefix of the files. Defaults to ``'unused_params'``.
    """

    priority = 'NORMAL'  # after RuntimeInfoHook, before LoggerHook prints the line

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
                'interval, out_dir, max_modules_in_log, plot, file_prefix.')
        for name, value in (('interval', interval), ('max_modules_in_log', max_modules_in_log)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f'UnusedParamsHook: {name} must be a positive integer, not '
                                 f'{value!r}; e.g. {name}=50.')
        self.interval = interval
        self.out_dir = out_dir
        self.max_modules_in_log = max_modules_in_log
        self.plot = plot
        self.file_prefix = file_prefix
        self.record: Optional[ParamUsageRecord] = None
        self.history: Optional[HistoryFile] = None
        self._drives_record = False
        self._ddp_fast_path = False

    def before_run(self, runner) -> None:
        model = runner.model
        if isinstance(model, GuardedDDP):
            self.record = model.usage_record
            if model.stall_watchdog is not None:
                # A stall that ends the run leaves through os._exit: no after_train.
                model.stall_watchdog.add_exit_callback(lambda: self._write_summary(runner))
        else:
            module = model.module if is_model_wrapper(model) else model
            self.record = ParamUsageRecord(module)
            self._drives_record = True
            self._ddp_fast_path = (isinstance(model, DistributedDataParallel)
                                   and not model.find_unused_parameters
                                   and not model.static_graph)
            self._warn_graph_search_accumulation(runner, model)
        self._runner = runner
        self.record.add_listener(self._on_usage)
        self.out_dir = self.out_dir or runner.work_dir
        self.history = HistoryFile(history_path(self.out_dir, self.file_prefix), runner.logger)
        self._prepare_out_dir(runner)

    @staticmethod
    def _warn_graph_search_accumulation(runner, model) -> None:
        counts = configured_accumulation(runner)
        if isinstance(model, DistributedDataParallel) and model.find_unused_parameters \
                and counts > 1 and not graph_search_accumulates_right(torch.__version__):
            runner.logger.warning('UnusedParamsHook: ' + ACCUMULATION_BUG_UNGUARDED.format(
                counts=counts, torch_version=torch.__version__))

    @master_only
    def _prepare_out_dir(self, runner) -> None:
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            write_table(table_path(self.out_dir, self.file_prefix),
                        [self.record.table.describe(i) for i in range(len(self.record.table))])
            self.history.start(fresh=not runner._resume)
        except OSError as error:
            raise OSError(f'UnusedParamsHook: cannot write to out_dir={self.out_dir!r} '
                          f'({error.strerror}); pass a writable out_dir, or fix the work '
                          'dir\'s permissions.') from error

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint.setdefault('meta', {})[CHECKPOINT_KEY] = self.record.statistics.state_dict()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        meta = checkpoint.get('meta', {})
        state, resumed_iter = meta.get(CHECKPOINT_KEY), meta.get('iter', 0)
        if not runner._resume:
            if state is not None:
                runner.logger.info('UnusedParamsHook: load_from starts a new run from the '
                                   "checkpoint's weights; its unused-parameter statistics are "
                                   'not carried over.')
            return
        num_params = len(self.record.table)
        if state is not None and state['num_params'] != num_params:
            # A layer added, removed, frozen or unfrozen since the checkpoint: the old counts
            # and the file's ids belong to another parameter table.
            runner.logger.warning(
                f'UnusedParamsHook: the checkpoint\'s statistics count {state["num_params"]} '
                f'trainable parameters but this model has {num_params}; the statistics start '
                f'fresh at iteration {resumed_iter}, so the summary covers the resumed part '
                f'only.{self._set_history_aside(resumed_iter) or ""}')
            return
        if state is None:
            runner.logger.warning('UnusedParamsHook: the checkpoint holds no unused-parameter '
                                  'statistics; the summary covers the resumed part only.')
        else:
            self.record.statistics.load_state_dict(state)
        self._keep_history_before(resumed_iter)

    @master_only
    def _keep_history_before(self, resumed_iter: int) -> None:
        self.history.keep_before(resumed_iter)

    @master_only
    def _set_history_aside(self, resumed_iter: int) -> str:
        moved = self.history.set_aside(f'before-iter{resumed_iter}')
        return f' The earlier per-iteration file is now {moved}.' if moved else ''

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        if self._drives_record:
            self.record.start_iteration()

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if self._ddp_fast_path:
            unreached = self.record.local_unreached()
            if unreached:
                raise unused_parameters_error(
                    self.record.table, {self.record.rank: unreached}, runner.iter,
                    'the config: plain DDP (UnusedParamsHook cannot report across ranks '
                    'here)')
        if self._drives_record:
            self.record.end_local_iteration(runner.iter)
        self.record.resolve()
        if self._exchange_due(runner, batch_idx):
            self.record.exchange()

    def _exchange_due(self, runner, batch_idx: int) -> bool:
        """At LoggerHook's log lines, at CheckpointHook's iteration checkpoints (saved by rank
        0 alone, so the exchange must come first, here), at the end of an epoch and of
        training: the same iterations on every rank."""
        if (self.end_of_epoch(runner.train_dataloader, batch_idx)
                or self.is_last_train_iter(runner)):
            return True
        for hook in runner.hooks:
            if isinstance(hook, LoggerHook) and (
                    self.every_n_inner_iters(batch_idx, hook.interval)
                    or self.every_n_train_iters(runner, hook.interval)):
                return True
            if (isinstance(hook, CheckpointHook) and not hook.by_epoch
                    and self._checkpoint_due(runner, hook)):
                return True
        return False

    def _checkpoint_due(self, runner, hook: CheckpointHook) -> bool:
        # CheckpointHook's save_begin, and every_n_train_iters' start, are newer than
        # mmengine 0.8.0, whose CheckpointHook saves every interval from the start.
        if not hasattr(hook, 'save_begin'):
            return self.every_n_train_iters(runner, hook.interval)
        return self.every_n_train_iters(runner, hook.interval, hook.save_begin)

    def _on_usage(self, usage: IterationUsage, changed: bool) -> None:
        """Every iteration once its per-rank detail is known (the record's listener)."""
        runner = self._runner
        runner.message_hub.update_scalar('train/unused_params',
                                         len(usage.unused_on_any_rank))
        if usage.unused_on_any_rank and (changed
                                         or self.record.statistics.iterations_with_unused == 1
                                         or (usage.iteration + 1) % self.interval == 0):
            runner.logger.info(self._describe(usage, changed))
        self._append_line(runner, usage)

    def _describe(self, usage: IterationUsage, changed: bool) -> str:
        table, limit = self.record.table, self.max_modules_in_log
        everywhere = usage.unused_on_all_ranks
        lines = [f'UnusedParamsHook: iteration {usage.iteration}: '
                 f'{len(usage.unused_on_any_rank)} parameters unused'
                 + ('' if len(usage.per_rank_unused) == 1 else
                    f' ({len(everywhere)} on every rank)')
                 + (' (changed since the previous iteration)' if changed else '')]
        if everywhere:
            if len(usage.per_rank_unused) > 1:
                lines.append('  on every rank:')
            lines += [f'    {line}' for line in table.grouped(everywhere, limit)]
        by_ranks: Dict[tuple, List[int]] = {}
        for index in sorted(usage.unused_on_any_rank - everywhere):
            by_ranks.setdefault(tuple(usage.ranks_of(index)), []).append(index)
        for ranks, ids in by_ranks.items():
            lines.append(f'  only on rank(s) {",".join(map(str, ranks))}:')
            lines += [f'    {line}' for line in table.grouped(ids, limit)]
        return '\n'.join(lines)

    @master_only
    def _append_line(self, runner, usage: IterationUsage) -> None:
        line = dict(iter=usage.iteration, epoch=runner.epoch,
                    unused_per_rank=[list(ids) for ids in usage.per_rank_unused])
        if usage.ranks_left_unreached:
            line['ranks_left_unreached'] = usage.ranks_left_unreached
        self.history.append(line)

    def after_train_epoch(self, runner) -> None:
        self.record.exchange()  # before an epoch checkpoint; a no-op when nothing is open

    def after_train(self, runner) -> None:
        self.record.resolve()
        self.record.exchange()
        self._write_summary(runner)

    @master_only
    def _write_summary(self, runner) -> None:
        """Logs the summary and writes its files; a file that cannot be written is a
        warning (the summary is in the log, and ``summarize`` rebuilds the files)."""
        if not self.history.flush():
            runner.logger.warning(
                f'UnusedParamsHook: iterations {self.history.pending_iterations[0]}-'
                f'{self.history.pending_iterations[-1]} could not be written to '
                f'{self.history.path}; the summary below counts them.')
        table = self.record.table
        summary = summary_dict(table, self.record.statistics, self.record.world_size)
        try:
            history = read_history(self.history.path, runner.logger, len(table))
        except OSError as error:
            runner.logger.warning(f'UnusedParamsHook: cannot read {self.history.path} '
                                  f'({error.strerror or error}); the PNG is not drawn.')
            history = []
        try:
            paths = write_summary(self.out_dir, self.file_prefix, summary, table, history,
                                  self.plot)
            files = 'Files: ' + ', '.join(paths.values())
        except OSError as error:
            files = (f'The summary files could not be written in {self.out_dir} '
                     f'({error.strerror or error}); once it is writable, '
                     f'`python -m mmdet3d_ddp_guard summarize {self.out_dir}` rebuilds them.')
            runner.logger.warning(f'UnusedParamsHook: {files}')
        except ImportError as error:
            files = (f'No PNG: {error}. Install matplotlib, or pass plot=False; the text and '
                     'JSON summary files are written.')
            runner.logger.warning(f'UnusedParamsHook: {files}')
        # Indented (blank lines too) like every multi-line message of this package, so log
        # filters that keep a record's indented lines keep all of it.
        runner.logger.info('UnusedParamsHook summary\n' + textwrap.indent(
            summary_text(summary) + '\n' + files, '  ', lambda line: True))
