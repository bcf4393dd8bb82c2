"""The unused-parameter report for mmcv 1.x's runners: :class:`UnusedParamsHook`, the same
report as under MMEngine (which iterations left which parameters unused on which rank), read
through mmcv's hooks, logger and checkpoint meta."""
import functools
from typing import List

from mmcv.parallel import is_module_wrapper
from mmcv.runner import (HOOKS, BaseRunner, CheckpointHook, Hook, IterBasedRunner, LoggerHook,
                         OptimizerHook, get_dist_info)

from ..guard.iteration_usage import IterationUsage
from ..environment.framework_table import MMCV1_LINES
from ..reporting.report import CHECKPOINT_KEY
from ..reporting.report_options import ReportOptions
from .guarded_mmcv_ddp import GuardedMMDistributedDataParallel

#: The runner attribute that keeps the ``meta`` of the checkpoint it loaded last.
LOADED_META = 'ddp_guard_loaded_meta'


@HOOKS.register_module()
class UnusedParamsHook(ReportOptions, Hook):
    """Reports which parameters went unused in every training iteration, on every rank,
    under mmcv-full 1.x's runners (``IterBasedRunner``, ``EpochBasedRunner``):
    ``custom_hooks = [dict(type='UnusedParamsHook', interval=50)]``.

    It logs and writes what MMEngine's hook does, through the same
    :class:`~mmdet3d_ddp_guard.reporting.report.UsageReport` (read
    :class:`mmdet3d_ddp_guard.openmmlab2.hooks.unused_params_hook.UnusedParamsHook` for
    the files and their fault tolerance): the names when the unused set appears or changes
    and every ``interval`` iterations, ``<prefix>_table.json``, ``<prefix>.jsonl``, and
    after training ``<prefix>_summary.{txt,json,png}``;
    ``python -m mmdet3d_ddp_guard summarize WORK_DIR`` reads them.

    What is mmcv's here:

    - **Which record.** Under :class:`GuardedMMDistributedDataParallel` (the guard's
      ``custom_imports`` line) it reads the wrapper's ``usage_record``: one set of autograd
      hooks, the per-rank detail on DDP's buckets, no collective of its own; a stall that
      ends the run writes the summary first. Under any other wrapper (mmcv's own DDP with
      ``ddp_guard = dict(enabled=False)``, ``MMDataParallel``) it installs a record on
      ``runner.model.module`` and the ranks exchange their masks at the log lines of
      ``LoggerHook``, at ``CheckpointHook``'s iteration checkpoints, at the end of each
      epoch and of training. Under plain DDP with ``find_unused_parameters=False`` a rank
      that left parameters unreached stops with :class:`UnusedParametersError`.
    - **The log line.** ``runner.log_buffer.update({'unused_params': n})`` for every
      resolved iteration (``n``: parameters unused on at least one rank), in
      ``after_train_iter``, so mmcv's ``LoggerHook`` (priority VERY_LOW) averages it over
      its window like the losses: ``unused_params: 3.0000``.
    - **Priority.** The default NORMAL of ``custom_hooks`` fits: after the optimizer hook
      (ABOVE_NORMAL, which back-propagates in ``after_train_iter``), before ``LoggerHook``
      (VERY_LOW, which averages ``log_buffer`` and prints). A priority that runs it before
      an optimizer hook is warned about.
    - **Checkpoints.** mmcv 1.x has no ``before_save_checkpoint``: the hook keeps the
      statistics in ``runner.meta['unused_params']``, which ``runner.save_checkpoint``
      writes into every checkpoint's ``meta``. They cover the iterations before the
      checkpoint's ``meta['iter']``, where the resumed run goes on: ``IterBasedRunner``
      saves ``iter_N.pth`` during iteration N - 1 with ``iter=N - 1`` and trains that
      iteration again after a resume, so the state is taken at ``before_train_iter``
      (the ranks exchange at the iteration before a checkpoint's); ``EpochBasedRunner``
      saves after the epoch with ``iter`` = the iterations done, so the state is also
      taken at the epoch's last iteration. On resume the hook reads them from the
      checkpoint the runner loaded: ``EpochBasedRunner.resume`` makes the checkpoint's
      meta ``runner.meta``, but ``IterBasedRunner.resume`` keeps only its epoch and
      iteration, so importing this module makes ``BaseRunner.load_checkpoint`` (which
      every resume and ``load_from`` go through) keep the loaded meta on the runner as
      ``ddp_guard_loaded_meta``. A resumed run is one whose ``runner.iter`` is past 0 at
      ``before_run``; the per-iteration file drops its lines from that iteration on, and
      a ``load_from`` starts new counts, as under MMEngine.

    Args:
        interval (int): Log the names every ``interval`` iterations while some are unused.
            Defaults to 50.
        out_dir (str, optional): Where the files go. Defaults to the runner's ``work_dir``.
        max_modules_in_log (int): Modules listed per group in a log message before the rest
            is summarised. Defaults to 12.
        plot (bool): Write the PNG (needs matplotlib). Defaults to True.
        file_prefix (str): Prefix of the files. Defaults to ``'unused_params'``.
    """

    # No class attribute ``priority``: mmcv's register_hook refuses hooks that have one.

    def __init__(self, **options):
        super().__init__(**options)
        self._state_stale = False

    def before_run(self, runner) -> None:
        model = runner.model
        # Under mmcv's DDP no no_sync() runs (GradientCumulativeOptimizerHook reduces every
        # micro-step), so MMEngine's warning about the graph search's accumulation is moot.
        self.start_report(model, model.module if is_module_wrapper(model) else model,
                          isinstance(model, GuardedMMDistributedDataParallel),
                          runner.work_dir, runner.logger, get_dist_info()[0] == 0,
                          MMCV1_LINES)
        # mmcv's runners count from 0 unless runner.resume set epoch and iter.
        resumed = runner.iter > 0
        self.report.prepare_out_dir(fresh=not resumed)
        loaded = getattr(runner, LOADED_META, None)
        if loaded is None and resumed:
            loaded = runner.meta  # a runner whose load_checkpoint kept nothing
        if loaded is not None or resumed:
            self.report.restore((loaded or {}).get(CHECKPOINT_KEY), runner.iter, resumed)
        if runner.meta is None:
            runner.meta = {}  # save_checkpoint writes runner.meta only when it is a dict
        self._state_stale = True
        self._store_state(runner)
        later = [type(hook).__name__ for hook in runner.hooks[runner.hooks.index(self):]
                 if isinstance(hook, OptimizerHook)]
        if later:
            runner.logger.warning(
                f'UnusedParamsHook: runs before {later[0]}, which back-propagates in '
                'after_train_iter, so it would read each iteration before its backward; '
                "register it at priority 'NORMAL' (the default of custom_hooks) or later.")

    def before_train_iter(self, runner) -> None:
        # The state of the iterations before this one: what a checkpoint IterBasedRunner
        # saves during this iteration must hold (see the class docstring).
        if not self.record.open_iterations:
            self._store_state(runner)
        self.report.start_iteration()

    def after_train_iter(self, runner) -> None:
        self._log_counts(runner, self.report.end_iteration(
            runner.iter, self._exchange_due(runner), runner.epoch))
        if self.end_of_epoch(runner) and not isinstance(runner, IterBasedRunner):
            self._store_state(runner)  # for the epoch's checkpoint, whatever the priorities

    def _exchange_due(self, runner) -> bool:
        """At LoggerHook's log lines, before CheckpointHook's iteration checkpoints (the
        iteration before theirs: the state is taken at before_train_iter), at the end of an
        epoch and of training: the same iterations on every rank."""
        if self.end_of_epoch(runner) or self.is_last_iter(runner):
            return True
        following = runner.iter + 2  # as every_n_iters counts, for the next iteration
        for hook in runner.hooks:
            if isinstance(hook, LoggerHook) and (self.every_n_inner_iters(runner, hook.interval)
                                                 or self.every_n_iters(runner, hook.interval)):
                return True
            if isinstance(hook, CheckpointHook) and not hook.by_epoch and (
                    (hook.interval > 0 and following % hook.interval == 0)
                    or (hook.save_last and following == runner.max_iters)):
                return True
        return False

    def _log_counts(self, runner, reported: List[IterationUsage]) -> None:
        """``unused_params`` on the log line, from the iterations the report just wrote."""
        for usage in reported:
            runner.log_buffer.update({'unused_params': len(usage.unused_on_any_rank)})
            self._state_stale = True

    def _store_state(self, runner) -> None:
        # Only when an iteration was counted since: the state is O(parameters) to build.
        if self._state_stale and isinstance(runner.meta, dict):
            runner.meta[CHECKPOINT_KEY] = self.report.state_dict()
            self._state_stale = False

    def after_train_epoch(self, runner) -> None:
        # Before an epoch checkpoint; nothing when no iteration is open.
        self._log_counts(runner, self.report.collect(True, runner.epoch))
        self._store_state(runner)

    def after_run(self, runner) -> None:
        self._log_counts(runner, self.report.finish(runner.epoch))
        if isinstance(runner.model, GuardedMMDistributedDataParallel):
            for revision in runner.model.take_revisions():  # what the last exchange revised
                runner.model.log(revision)


def keep_loaded_checkpoint_meta() -> bool:
    """Makes ``BaseRunner.load_checkpoint`` keep the loaded checkpoint's ``meta`` on the
    runner (:data:`LOADED_META`): ``IterBasedRunner.resume`` drops it, and the hook's
    statistics are in it. Called by :mod:`.import_changes` when the package is imported,
    before any runner resumes (the config's ``custom_imports``, or the train script's
    import, runs long before ``train_detector`` calls ``runner.resume``); returns whether it
    wrapped it (not when wrapped already)."""
    if getattr(BaseRunner.load_checkpoint, 'keeps_meta', False):
        return False
    load_checkpoint = BaseRunner.load_checkpoint

    @functools.wraps(load_checkpoint)
    def keeping_meta(self, *args, **kwargs):
        checkpoint = load_checkpoint(self, *args, **kwargs)
        meta = checkpoint.get('meta') if isinstance(checkpoint, dict) else None
        setattr(self, LOADED_META, meta if isinstance(meta, dict) else {})
        return checkpoint

    keeping_meta.keeps_meta = True
    BaseRunner.load_checkpoint = keeping_meta
    return True
