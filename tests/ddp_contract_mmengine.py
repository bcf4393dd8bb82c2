"""The DDP contract's MMEngine adapter: ``GuardedDDP`` against MMEngine's own
``MMDistributedDataParallel`` built as ``Runner.wrap_model`` builds it, each trained through
its ``train_step`` and an ``OptimWrapper`` (``accumulative_counts``: MMEngine's ``no_sync``)."""
import contextlib
import io
import os.path as osp

import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.evaluator import BaseMetric
from mmengine.hooks import Hook
from mmengine.model import BaseModel, MMDistributedDataParallel, is_model_wrapper
from mmengine.optim import OptimWrapper
from mmengine.registry import DATASETS, HOOKS, METRICS, MODELS
from mmengine.runner import Runner

from mmdet3d_ddp_guard import GuardedDDP
from tests.ddp_contract import (ContractNet, copy_for_ema, dense_copy, sgd_param_groups,
                                update_ema)
from tests.dist_utils import TRUSTED_LOAD


class ContractModel(BaseModel):

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, tokens, use_branch=True, use_embedding=True, mode='loss'):
        output = self.net(tokens, use_branch, use_embedding)
        return dict(loss=output) if mode == 'loss' else [output.detach()]


class MMEngineAdapter:

    def model(self, net):
        return ContractModel(net)

    def wrap(self, model, guarded: bool, mode, **kwargs):
        """``mode``: the guard's ``find_unused_parameters`` ('auto': not written), or for
        MMEngine's own wrapper whether to run DDP's graph search."""
        if guarded:
            if mode != 'auto':
                kwargs['find_unused_parameters'] = mode
            return GuardedDDP(model, **kwargs)
        # Runner.wrap_model's arguments when the config has no model_wrapper_cfg.
        kwargs.setdefault('broadcast_buffers', False)
        return MMDistributedDataParallel(model, find_unused_parameters=mode, **kwargs)

    def optimizer(self, ddp, accumulate: int, momentum: float):
        return OptimWrapper(torch.optim.SGD(sgd_param_groups(ddp, momentum), lr=0.05),
                            accumulative_counts=accumulate)

    def optimizer_state(self, optim_wrapper):
        return optim_wrapper.optimizer.state_dict()

    def step(self, ddp, optim_wrapper, batch, iteration: int, accumulate: int):
        ddp.train_step(batch, optim_wrapper)

    def val(self, ddp, batch):
        return ddp.val_step(batch)[0]

    def forward(self, ddp, batch):
        """A train-mode forward through the wrapper that nobody back-propagates."""
        return ddp(**batch, mode='loss')

    def runner_with_report_hook(self, ddp, optim_wrapper, batches, work_dir: str):
        """A real Runner that trains ``ddp`` on ``batches`` (one per iteration) with
        UnusedParamsHook and a LoggerHook every 2 iterations; ``run(runner)`` trains."""
        from mmdet3d_ddp_guard import UnusedParamsHook
        loader = torch.utils.data.DataLoader(batches, batch_size=1,
                                             collate_fn=lambda one: one[0])
        return Runner(model=ddp, work_dir=work_dir, train_dataloader=loader,
                      train_cfg=dict(by_epoch=False, max_iters=len(batches)),
                      optim_wrapper=optim_wrapper,
                      custom_hooks=[UnusedParamsHook(interval=2)],
                      default_hooks=dict(logger=dict(type='LoggerHook', interval=2),
                                         checkpoint=None),
                      log_processor=dict(by_epoch=False), default_scope='mmengine',
                      experiment_name=f'one_way_{dist.get_rank()}_{id(ddp)}')

    @staticmethod
    def run(runner):
        runner.train()


# The wrapper under MMEngine's Runner, as users' hooks handle it: an EMA hook that copies
# the wrapper (BEVDet's MEGVIIEMAHook in its MMEngine form), SyncBuffersHook, a val loop
# during training, checkpoints saved and resumed, the whole wrapper saved with torch.save.

RUNNER_ITERATIONS = 6
EMA_DECAY = 0.9


@MODELS.register_module()
class ContractRunnerModel(BaseModel):
    """ContractNet under a Runner: rank 1 skips the branch in every odd training forward;
    ``predict`` scores each sample alone (batch norm's running statistics decide it)."""

    def __init__(self):
        super().__init__()
        self.net = ContractNet()
        self.forwards = 0

    def forward(self, tokens, mode='loss', data_samples=None):
        if mode == 'loss':
            self.forwards += 1
            skip = dist.get_rank() == 1 and self.forwards % 2 == 0
            return dict(loss=self.net(tokens, use_branch=not skip))
        return [self.net(tokens[i:i + 1]).detach() for i in range(len(tokens))]


@DATASETS.register_module()
class ContractTokens(torch.utils.data.Dataset):

    def __len__(self):
        return 32

    def __getitem__(self, index):
        return dict(tokens=torch.tensor((index * 5) % 8))


@METRICS.register_module()
class ContractMeanScore(BaseMetric):

    def process(self, data_batch, data_samples):
        self.results.extend(float(score) for score in data_samples)

    def compute_metrics(self, results):
        return dict(mean_score=sum(results) / len(results))


@HOOKS.register_module()
class CopyTheWrapperEMAHook(Hook):
    """BEVDet's MEGVIIEMAHook, MMEngine form: the SyncBN groups set to None around
    ``deepcopy(runner.model)`` (the wrapper), the copy updated from
    ``runner.model.module.state_dict()`` after every iteration; at the end the whole
    wrapper saved with ``torch.save`` and loaded back."""

    def before_run(self, runner):
        self.ema = copy_for_ema(runner.model)
        assert is_model_wrapper(self.ema), type(self.ema)
        self.val_metrics = []

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        update_ema(self.ema, runner.model, EMA_DECAY)

    def after_val_epoch(self, runner, metrics=None):
        self.val_metrics.append(dict(metrics))

    def after_train(self, runner):
        buffer = io.BytesIO()
        torch.save(runner.model, buffer)
        buffer.seek(0)
        self.saved = torch.load(buffer, **TRUSTED_LOAD)


def _runner_cfg(work_dir: str, guarded: bool, max_iters: int, resume: bool = False) -> dict:
    cfg = dict(
        model=dict(type='ContractRunnerModel'),
        work_dir=work_dir,
        experiment_name=f'contract_{guarded}_{max_iters}_{abs(hash(work_dir))}',
        train_dataloader=dict(batch_size=4, num_workers=0,
                              sampler=dict(type='DefaultSampler', shuffle=False),
                              collate_fn=dict(type='default_collate'),
                              dataset=dict(type='ContractTokens')),
        val_dataloader=dict(batch_size=4, num_workers=0,
                            sampler=dict(type='DefaultSampler', shuffle=False),
                            collate_fn=dict(type='default_collate'),
                            dataset=dict(type='ContractTokens')),
        val_evaluator=dict(type='ContractMeanScore'),
        val_cfg=dict(),
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=2),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9)),
        # SyncBuffersHook after the resume only: before it, each rank keeps its own batch
        # norm statistics, which the val loop sees.
        custom_hooks=[dict(type='CopyTheWrapperEMAHook')]
        + ([dict(type='SyncBuffersHook')] if resume else []),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=RUNNER_ITERATIONS,
                                           by_epoch=False)),
        log_processor=dict(by_epoch=False),
        launcher='pytorch',
        env_cfg=dict(dist_cfg=dict(backend='gloo')),
        default_scope='mmengine',
        randomness=dict(seed=0),
        resume=resume)
    if guarded:
        cfg['model_wrapper_cfg'] = dict(type='GuardedDDP')  # the README's line
    else:
        cfg['find_unused_parameters'] = True  # what plain DDP needs for the skipped branch
    return cfg


@contextlib.contextmanager
def _runner_s_own_wrapper_on_the_cpu():
    """``Runner.wrap_model`` without ``model_wrapper_cfg`` builds MMEngine's own wrapper with
    the arguments it writes itself, ``device_ids`` among them, which DDP refuses for a CPU
    module: on the CPU the same call builds CPUCompatibleMMDDP, which drops them alone."""
    if torch.cuda.is_available():
        yield
        return
    import mmengine.runner.runner as runner_module

    from mmdet3d_ddp_guard import CPUCompatibleMMDDP
    original = runner_module.MMDistributedDataParallel
    runner_module.MMDistributedDataParallel = CPUCompatibleMMDDP
    try:
        yield
    finally:
        runner_module.MMDistributedDataParallel = original


def train_runner_with_wrapper_hooks(rank: int, world_size: int, work_dir: str):
    """Both wrappers through real Runners, one after the other: what every rank ends with,
    then the same after resuming from the checkpoint and training 2 more iterations."""
    results = {}
    for guarded in (False, True):
        folder = osp.join(work_dir, 'guarded' if guarded else 'own')
        for max_iters, resume in ((RUNNER_ITERATIONS, False), (RUNNER_ITERATIONS + 2, True)):
            with _runner_s_own_wrapper_on_the_cpu():
                runner = Runner.from_cfg(Config(_runner_cfg(folder, guarded, max_iters,
                                                            resume)))
            runner.train()
            ema = next(h for h in runner.hooks if isinstance(h, CopyTheWrapperEMAHook))
            model = runner.model.module
            results[(guarded, resume)] = dict(
                broadcast_buffers=runner.model.broadcast_buffers,
                weights=dense_copy(dict(model.named_parameters())),
                buffers=dense_copy(dict(model.named_buffers())),
                optimizer=dense_copy(runner.optim_wrapper.state_dict()),
                ema=dense_copy(ema.ema.state_dict()),
                val_metrics=ema.val_metrics,
                saved=dense_copy(ema.saved.state_dict()),
                saved_class=type(ema.saved).__name__,
                saved_watchdog=getattr(ema.saved, 'stall_watchdog', None) is not None)
            watchdog = getattr(runner.model, 'stall_watchdog', None)
            if watchdog is not None:
                watchdog.stop()
    return results
