# mmdet3d's PGD (monocular 3D, ResNet-101 + FPN, KITTI, 3 classes), model unchanged except
# for mmdet's activation checkpointing in the backbone (`with_cp=True`: every ResNet block
# runs under torch.utils.checkpoint, reentrant), on tiny synthetic KITTI data for 2
# iterations on 2 CPU ranks, with the guard on. Make the data first (repo root):
#   python -m demo.make_tiny_data   (from the repository root)
# DDP's graph search (find_unused_parameters=True) cannot train a reentrant-checkpointed
# model ("Expected to mark a variable ready only once"); GuardedDDP can. The backbone's stem
# and its batch norms are frozen (frozen_stages=0, BN requires_grad=False), as in mmdet3d.
_base_ = [
    'mmdet3d::pgd/pgd_r101-caffe_fpn_head-gn_4xb3-4x_kitti-mono3d.py',
    '../_base_/ddp_guard.py', '../_base_/schedules/tiny_run.py'
]
# No download of the ImageNet weights of ResNet-101 (training starts from random weights).
model = dict(backbone=dict(with_cp=True, init_cfg=None))

data_root = 'data/tiny/kitti/'
# mmdet3d's train pipeline with images resized to 621 x 188 instead of 1242 x 375 (a
# quarter of the pixels: ResNet-101 on the CPU).
train_pipeline = [
    dict(step, scale=(621, 188)) if step['type'] == 'mmdet.Resize' else step
    for step in _base_.train_pipeline
]
# Batch size 1, in the main process.
train_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(data_root=data_root, pipeline=train_pipeline))

# The short run shared by the examples, a log line each iteration and no validation (why it
# is applied this way: configs/_base_/schedules/tiny_run.py), here with 2 iterations.
globals().update(_base_.pop('tiny_run'))
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=2)
