# A small detector whose branch is skipped on odd iterations and which keeps a dead layer:
# plain DDP dies on it at the first iteration; GuardedDDP trains it. Runs on 2 CPU ranks in
# seconds. The quick demo (`python -m demo configs/toy/...`), the check
# command and the Runner/torchrun tests use it.
custom_imports = dict(
    imports=['mmdet3d_ddp_guard', 'tests.toys'], allow_failed_imports=False)

model = dict(type='ToyDetector', pattern='skip_odd', width=16)
model_wrapper_cfg = dict(type='GuardedDDP')

train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(type='ToyDataset', length=64))
train_cfg = dict(type='IterBasedTrainLoop', max_iters=6)
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=1e-3))

default_scope = 'mmdet3d'
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=1),
    checkpoint=dict(type='CheckpointHook', interval=1000, by_epoch=False))
log_processor = dict(by_epoch=False)
env_cfg = dict(dist_cfg=dict(backend='gloo'))
log_level = 'INFO'
randomness = dict(seed=0)
custom_hooks = [dict(type='UnusedParamsHook', interval=50)]
