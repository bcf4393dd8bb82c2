"""MMEngine's :class:`UnusedParamsHook`: the adapter of
:class:`~mmdet3d_ddp_guard.reporting.report.UsageReport` to MMEngine's Runner."""
from typing import List, Optional

import torch
from mmengine.dist import is_main_process
from mmengine.hooks import CheckpointHook, Hook, LoggerHook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS
from torch.nn.parallel import DistributedDataParallel

from ...environment.framework_table import MMENGINE_LINES
from ...environment.versions import graph_search_accumulates_right
from ..accumulation import ACCUMULATION_BUG_UNGUARDED, configured_accumulation
from ...guard.iteration_usage import IterationUsage
from ...reporting.report import CHECKPOINT_KEY
from ...reporting.report_options import ReportOptions
from ..guarded_ddp import GuardedDDP


@HOOKS.register_module()
class UnusedParamsHook(ReportOptions, Hook):
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
    :mod:`mmdet3d_ddp_guard.reporting.history_file`):
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
    # A checkpoint loaded before ``before_run`` built the report (FlexibleRunner loads first).
    _loaded_before_run: Optional[tuple] = None

    def before_run(self, runner) -> None:
        model = runner.model
        guarded = isinstance(model, GuardedDDP)
        if not guarded:
            self._warn_graph_search_accumulation(runner, model)
        self.start_report(model, model.module if is_model_wrapper(model) else model, guarded,
                          runner.work_dir, runner.logger, is_main_process(), MMENGINE_LINES)
        self.report.prepare_out_dir(fresh=not runner._resume)
        if self._loaded_before_run is not None:
            self.report.restore(*self._loaded_before_run, resumed=runner._resume)

    @staticmethod
    def _warn_graph_search_accumulation(runner, model) -> None:
        counts = configured_accumulation(runner)
        if isinstance(model, DistributedDataParallel) and model.find_unused_parameters \
                and counts > 1 and not graph_search_accumulates_right(torch.__version__):
            runner.logger.warning('UnusedParamsHook: ' + ACCUMULATION_BUG_UNGUARDED.format(
                counts=counts, torch_version=torch.__version__))

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint.setdefault('meta', {})[CHECKPOINT_KEY] = self.report.state_dict()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        meta = checkpoint.get('meta', {})
        loaded = (meta.get(CHECKPOINT_KEY), meta.get('iter', 0))
        if self.report is None:
            self._loaded_before_run = loaded
        else:
            self.report.restore(*loaded, resumed=runner._resume)

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self.report.start_iteration()

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._log_counts(runner, self.report.end_iteration(
            runner.iter, self._exchange_due(runner, batch_idx), runner.epoch))

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

    @staticmethod
    def _log_counts(runner, reported: List[IterationUsage]) -> None:
        """``unused_params`` on the log line, from the iterations the report just wrote."""
        for usage in reported:
            runner.message_hub.update_scalar('train/unused_params',
                                             len(usage.unused_on_any_rank))

    def after_train_epoch(self, runner) -> None:
        # Before an epoch checkpoint; nothing when no iteration is open.
        self._log_counts(runner, self.report.collect(True, runner.epoch))

    def after_train(self, runner) -> None:
        self._log_counts(runner, self.report.finish(runner.epoch))
        if isinstance(runner.model, GuardedDDP):  # what the last exchange revised
            for revision in runner.model.take_revisions():
                runner.model.log(revision)
