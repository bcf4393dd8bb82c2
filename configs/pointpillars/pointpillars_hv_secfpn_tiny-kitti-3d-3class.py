# mmdet3d's PointPillars (KITTI, 3 classes), model unchanged, on tiny synthetic KITTI data
# for 4 iterations on 2 CPU ranks, with the guard on. Make the data first (from the repo
# root, which is the working directory for training):
#   python -m mmdet3d_ddp_guard make-tiny-data
# Every parameter of PointPillars is used in every iteration: GuardedDDP finds none unused
# and trains on DDP's fast path.
_base_ = [
    'mmdet3d::pointpillars/pointpillars_hv_secfpn_8xb6-160e_kitti-3d-3class.py',
    '../_base_/ddp_guard.py'
]

data_root = 'data/tiny/kitti/'

# mmdet3d's train pipeline without ObjectSample, which pastes objects from a ground-truth
# database (kitti_dbinfos_train.pkl) that the tiny data does not have.
train_pipeline = [
    step for step in _base_.train_pipeline if step['type'] != 'ObjectSample'
]

# mmdet3d's dataset inside its RepeatDataset wrapper (kept: it only repeats the frames);
# the settings of the dataset itself are under dataset.dataset. Batch size 1, in the main
# process.
train_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(dataset=dict(data_root=data_root, pipeline=train_pipeline)))

# 4 iterations at the schedule's base learning rate; no validation or test. (MMEngine
# refuses keys that two bases both set, so this block cannot move into a shared base.)
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=4)
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
val_dataloader = None
val_cfg = None
val_evaluator = None
test_dataloader = None
test_cfg = None
test_evaluator = None

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=1),
    checkpoint=dict(type='CheckpointHook', interval=1000, by_epoch=False))
log_processor = dict(by_epoch=False)
custom_hooks = [dict(type='UnusedParamsHook', interval=1)]
randomness = dict(seed=0)
load_from = None
