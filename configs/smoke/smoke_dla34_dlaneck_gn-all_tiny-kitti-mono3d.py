# mmdet3d's SMOKE (monocular 3D, DLA-34 + DLANeck, KITTI, 3 classes), model unchanged, on
# tiny synthetic KITTI data for 4 iterations on 2 CPU ranks, with the guard on. Make the data
# first, from the repo root (the working directory for training):
#   python -m demo.make_tiny_data   (from the repository root)
# mmdet3d marks this config `find_unused_parameters = True`: in DLA-34 the `project`
# shortcuts of backbone levels 3 and 4 are computed, then discarded by the inner tree (6
# parameters, unused in every iteration on every rank). Plain DDP
# (find_unused_parameters=False) dies at the second iteration; GuardedDDP trains it.
_base_ = [
    'mmdet3d::smoke/smoke_dla34_dlaneck_gn-all_4xb8-6x_kitti-mono3d.py',
    '../_base_/ddp_guard.py', '../_base_/schedules/tiny_run.py'
]
# Override the inherited `find_unused_parameters = True`, which GuardedDDP would honour
# (DDP's graph search every iteration), so that GuardedDDP chooses.
find_unused_parameters = 'auto'

# No download of the ImageNet weights of DLA-34 (training starts from random weights).
model = dict(backbone=dict(init_cfg=None))

data_root = 'data/tiny/kitti/'
# mmdet3d's train pipeline, with images resized to 640 x 192 instead of 1280 x 384: on
# the CPU the backward of the DCNv2 layers of DLANeck takes most of an iteration, and a
# quarter of the pixels makes an iteration about 5 times faster.
train_pipeline = [
    dict(step, img_scale=(640, 192)) if step['type'] == 'AffineResize' else step
    for step in _base_.train_pipeline
]
# Batch size 1, in the main process.
train_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(data_root=data_root, pipeline=train_pipeline))

# The short run shared by the examples: 4 iterations, a log line each, no validation
# (why it is applied this way: configs/_base_/schedules/tiny_run.py).
globals().update(_base_.pop('tiny_run'))
