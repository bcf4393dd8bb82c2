# mmdet3d's PointPillars (KITTI, 3 classes), model unchanged, on tiny synthetic KITTI data
# for 4 iterations on 2 CPU ranks, with the guard on. Make the data first (from the repo
# root, which is the working directory for training):
#   python -m demo.make_tiny_data   (from the repository root)
# Every parameter of PointPillars is used in every iteration: GuardedDDP finds none unused
# and trains on DDP's fast path.
_base_ = [
    'mmdet3d::pointpillars/pointpillars_hv_secfpn_8xb6-160e_kitti-3d-3class.py',
    '../_base_/ddp_guard.py', '../_base_/schedules/tiny_run.py'
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

# The short run shared by the examples: 4 iterations, a log line each, no validation
# (why it is applied this way: configs/_base_/schedules/tiny_run.py).
globals().update(_base_.pop('tiny_run'))
