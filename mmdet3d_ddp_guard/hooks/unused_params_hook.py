import json
import os
import os.path as osp
from typing import Dict, List, Optional

from mmengine.dist import master_only
from mmengine.hooks import CheckpointHook, Hook, LoggerHook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS
from torch.nn.parallel import DistributedDataParallel

from ..errors import unused_parameters_error
from ..guarded_ddp import GuardedDDP
from ..usage_record import IterationUsage, ParamUsageRecord
from ..usage_summary import write_summary

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
      PNG of unused frequency per module over iterations.
    - The accumulated counts are saved in checkpoints and restored on resume, so a resumed
      run's summary covers the whole run.

    Under :class:`GuardedDDP` the hook reads the wrapper's own usage record (one set of
    autograd hooks), whose per-rank detail rides DDP's last gradient bucket: the hook adds no
    collective and no measurable cost. Under any other wrapper it installs the record
    itself, and the ranks exchange their per-iteration masks in one ``all_gather`` per batch
    of iterations: at every log line of ``LoggerHook``, before every checkpoint, at the end
    of each epoch and of training. Nothing is lost (every iteration of every rank is in the
    files and the checkpointed counts); the log line's ``unused_params`` is exact for every
    logged window, and the names are logged when the exchange brings them. In a single
    process the record predicts whether multi-GPU training with plain DDP would fail.
    Under plain DDP with ``find_unused_parameters=False`` an unused parameter dooms the run
    (DDP fails at the next forward, or hangs the ranks that used it), and gathering across
    ranks would itself hang behind DDP's unfinished all-reduce: there the hook reports this
    rank's own usage and stops the run with :class:`UnusedParametersError` on the rank that
    left parameters unused, naming them.
    Cost: under GuardedDDP none of its own; otherwise a hook call per parameter per backward
    and one ``all_gather`` of ``iterations x parameters`` bytes per log interval.

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
        self._drives_record = False
        self._ddp_fast_path = False

    def before_run(self, runner) -> None:
        model = runner.model
        if isinstance(model, GuardedDDP):
            self.record = model.usage_record
        else:
            module = model.module if is_model_wrapper(model) else model
            self.record = ParamUsageRecord(module)
            self._drives_record = True
            self._ddp_fast_path = (isinstance(model, DistributedDataParallel)
                                   and not model.find_unused_parameters
                                   and not model.static_graph)
        self._runner = runner
        self.record.add_listener(self._on_usage)
        self.out_dir = self.out_dir or runner.work_dir
        self._prepare_out_dir(runner)

    @master_only
    def _prepare_out_dir(self, runner) -> None:
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            with open(self._path('table.json'), 'w') as f:
                json.dump([self.record.table.describe(i) for i in range(len(self.record.table))],
                          f)
        except OSError as error:
            raise OSError(f'UnusedParamsHook: cannot write to out_dir={self.out_dir!r} '
                          f'({error.strerror}); pass a writable out_dir, or fix the work '
                          'dir\'s permissions.') from error
        if not runner._resume:  # a fresh run starts a fresh per-iteration file
            open(self._path('jsonl'), 'w').close()

    def _path(self, suffix: str) -> str:
        separator = '.' if suffix == 'jsonl' else '_'
        return osp.join(self.out_dir, f'{self.file_prefix}{separator}{suffix}')

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint.setdefault('meta', {})[CHECKPOINT_KEY] = self.record.statistics.state_dict()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        state = checkpoint.get('meta', {}).get(CHECKPOINT_KEY)
        if state is None:
            runner.logger.warning('UnusedParamsHook: the checkpoint holds no unused-parameter '
                                  'statistics; the summary covers the resumed part only.')
            return
        self.record.statistics.load_state_dict(state)
        self._truncate_history(checkpoint['meta'].get('iter', 0))

    @master_only
    def _truncate_history(self, resumed_iter: int) -> None:
        """Drops lines written after the checkpoint (a crash between save and resume)."""
        kept = [line for line in self._read_history() if line['iter'] < resumed_iter]
        with open(self._path('jsonl'), 'w') as f:
            f.writelines(json.dumps(line) + '\n' for line in kept)

    def _read_history(self) -> List[Dict]:
        if not osp.exists(self._path('jsonl')):
            return []
        with open(self._path('jsonl')) as f:
            return [json.loads(line) for line in f if line.strip()]

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        if self._drives_record:
            self.record.start_iteration()

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if self._ddp_fast_path:
            local_unused = self.record.local_unused()
            if local_unused:
                raise unused_parameters_error(
                    self.record.table, {self.record.rank: local_unused}, runner.iter,
                    'the config: plain DDP (UnusedParamsHook cannot report across ranks '
                    'here)')
            # Every rank that gets here used everything; one that did not has raised.
            self.record.end_local_iteration(runner.iter, (), same_on_every_rank=True)
        elif self._drives_record:
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
                    and self.every_n_train_iters(runner, hook.interval, hook.save_begin)):
                return True
        return False

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
        with open(self._path('jsonl'), 'a') as f:
            f.write(json.dumps(dict(iter=usage.iteration, epoch=runner.epoch,
                                    unused_per_rank=[list(ids)
                                                     for ids in usage.per_rank_unused]))
                    + '\n')

    def after_train_epoch(self, runner) -> None:
        self.record.exchange()  # before an epoch checkpoint; a no-op when nothing is open

    def after_train(self, runner) -> None:
        self.record.resolve()
        self.record.exchange()
        self._write_summary(runner)

    @master_only
    def _write_summary(self, runner) -> None:
        paths = write_summary(self.out_dir, self.file_prefix, self.record.table,
                              self.record.statistics, self.record.world_size,
                              self._read_history(), self.plot)
        with open(paths['text']) as f:
            runner.logger.info('UnusedParamsHook summary\n' + f.read()
                               + 'Files: ' + ', '.join(paths.values()))
