"""``custom_train_detector``: the plugin's own train loop, shaped like the codebases' ones
(BEVFormer/UniAD ``projects/mmdet3d_plugin/.../apis/mmdet_train.py``).

What matters to the tests: ``MMDistributedDataParallel`` is bound at MODULE TOP, so
whatever ``mmcv.parallel.MMDistributedDataParallel`` is when this module is first imported
is what the distributed branch wraps the model with; and ``find_unused_parameters`` comes
from ``cfg.get('find_unused_parameters', False)``.
"""
import torch
from mmcv.parallel import MMDataParallel, MMDistributedDataParallel
from mmcv.runner import (HOOKS, DistSamplerSeedHook, EpochBasedRunner, Fp16OptimizerHook,
                         OptimizerHook, build_optimizer, build_runner)
from mmcv.utils import build_from_cfg
from mmdet.core import DistEvalHook, EvalHook
from mmdet.datasets import build_dataloader, build_dataset, replace_ImageToTensor
from mmdet.utils import get_root_logger


def custom_train_detector(model, dataset, cfg, distributed=False, validate=False,
                          timestamp=None, meta=None):
    logger = get_root_logger(cfg.log_level)
    dataset = dataset if isinstance(dataset, (list, tuple)) else [dataset]
    runner_type = cfg.runner['type'] if 'runner' in cfg else 'EpochBasedRunner'
    loader_cfg = cfg.data.get('train_dataloader', {})
    data_loaders = [
        build_dataloader(
            ds,
            cfg.data.samples_per_gpu,
            cfg.data.workers_per_gpu,
            len(cfg.gpu_ids),  # ignored when distributed
            dist=distributed,
            shuffle=loader_cfg.get('shuffle', True),
            seed=cfg.seed,
            runner_type=runner_type) for ds in dataset
    ]

    cuda = torch.cuda.is_available()
    if distributed:
        find_unused_parameters = cfg.get('find_unused_parameters', False)
        model = MMDistributedDataParallel(
            model.cuda() if cuda else model,
            device_ids=[torch.cuda.current_device()] if cuda else None,
            broadcast_buffers=False,
            find_unused_parameters=find_unused_parameters)
    elif cuda:
        model = MMDataParallel(model.cuda(cfg.gpu_ids[0]), device_ids=cfg.gpu_ids)
    else:
        # On CPU MMDataParallel keeps no device ids and scatters the DataContainers itself.
        model = MMDataParallel(model.cpu())

    optimizer = build_optimizer(model, cfg.optimizer)
    runner = build_runner(
        cfg.runner,
        default_args=dict(model=model, optimizer=optimizer, work_dir=cfg.work_dir,
                          logger=logger, meta=meta))
    runner.timestamp = timestamp

    fp16_cfg = cfg.get('fp16', None)
    if fp16_cfg is not None:
        optimizer_config = Fp16OptimizerHook(**cfg.optimizer_config, **fp16_cfg,
                                             distributed=distributed)
    elif distributed and 'type' not in cfg.optimizer_config:
        optimizer_config = OptimizerHook(**cfg.optimizer_config)
    else:
        optimizer_config = cfg.optimizer_config

    runner.register_training_hooks(cfg.lr_config, optimizer_config, cfg.checkpoint_config,
                                   cfg.log_config, cfg.get('momentum_config', None))
    if distributed and isinstance(runner, EpochBasedRunner):
        runner.register_hook(DistSamplerSeedHook())

    if validate:
        val_samples_per_gpu = cfg.data.val.pop('samples_per_gpu', 1)
        if val_samples_per_gpu > 1:
            cfg.data.val.pipeline = replace_ImageToTensor(cfg.data.val.pipeline)
        val_dataset = build_dataset(cfg.data.val, dict(test_mode=True))
        val_dataloader = build_dataloader(val_dataset, samples_per_gpu=val_samples_per_gpu,
                                          workers_per_gpu=cfg.data.workers_per_gpu,
                                          dist=distributed, shuffle=False)
        eval_cfg = cfg.get('evaluation', {})
        eval_cfg['by_epoch'] = runner_type != 'IterBasedRunner'
        eval_hook = DistEvalHook if distributed else EvalHook
        runner.register_hook(eval_hook(val_dataloader, **eval_cfg), priority='LOW')

    # User-defined hooks, registered one by one as the codebases' trainers do.
    if cfg.get('custom_hooks', None):
        custom_hooks = cfg.custom_hooks
        assert isinstance(custom_hooks, list), \
            'custom_hooks expect list type, but got %s' % type(custom_hooks)
        for hook_cfg in cfg.custom_hooks:
            assert isinstance(hook_cfg, dict), \
                'Each item in custom_hooks expects dict type, but got %s' % type(hook_cfg)
            hook_cfg = hook_cfg.copy()
            priority = hook_cfg.pop('priority', 'NORMAL')
            hook = build_from_cfg(hook_cfg, HOOKS)
            runner.register_hook(hook, priority=priority)

    if cfg.resume_from:
        runner.resume(cfg.resume_from)
    elif cfg.load_from:
        runner.load_checkpoint(cfg.load_from)
    runner.run(data_loaders, cfg.workflow)
