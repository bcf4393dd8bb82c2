# A small detector whose refiner runs only for batches that hold a pedestrian; every 4th
# sample holds none. Batch 2, no shuffling: one process and 2 ranks always see a pedestrian,
# 4 ranks do not (rank 0 gets samples 0, 4, 8, ...), so plain DDP dies at iteration 0 on
# rank 0 there. `python -m mmdet3d_ddp_guard check THIS --world-size 4` predicts it from one
# process; `--cfg-options model.refiner_norm_cfg.type=SyncBN` makes the same skip a hang.
custom_imports = dict(
    imports=['mmdet3d_ddp_guard', 'tests.toys.gated_refiner_toy'],
    allow_failed_imports=False)

model = dict(type='ToyGatedRefinerDetector', width=16, refiner_norm_cfg=dict(type='BN1d'))
model_wrapper_cfg = dict(type='GuardedDDP')

train_dataloader = dict(
    batch_size=2,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(type='ToyPedestrianDataset', length=64, absent_every=4))
train_cfg = dict(type='IterBasedTrainLoop', max_iters=4)
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9))

default_scope = 'mmengine'
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=1),
    checkpoint=dict(type='CheckpointHook', interval=1000, by_epoch=False))
log_processor = dict(by_epoch=False)
env_cfg = dict(dist_cfg=dict(backend='gloo'))
randomness = dict(seed=0)
custom_hooks = [dict(type='UnusedParamsHook', interval=50)]
