# A tiny mmdet 2.x (mmcv-full 1.x Config) RetinaNet that trains on CPU in milliseconds per
# iteration, with a branch some batches skip (tests/openmmlab1/branch_detector.py).
#
# Data: tests.openmmlab1.tiny_coco.make_tiny_coco(root) output. The root comes from the
# environment variable TINY_COCO_ROOT (read when the config is loaded; default
# 'data/tiny_coco/', relative to the working directory), or per dataset via cfg options:
#   --cfg-options data.train.data_root=ROOT data.val.data_root=ROOT data.test.data_root=ROOT
# (ann_file and img_prefix are relative to the dataset's data_root).
#
# custom_imports needs the repository root importable: run with PYTHONPATH=<repo root>.
# find_unused_parameters is deliberately NOT written here (see the _unused_true/_false files).
import os

custom_imports = dict(imports=['tests.openmmlab1.branch_detector'], allow_failed_imports=False)

model = dict(
    type='BranchRetinaNet',
    refiner_channels=32,
    branch_label=1,
    init_cfg=None,
    backbone=dict(
        type='ResNet', depth=18, base_channels=16, num_stages=4, out_indices=(1, 2, 3),
        frozen_stages=-1, norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
        style='pytorch', init_cfg=None),
    neck=dict(type='FPN', in_channels=[32, 64, 128], out_channels=32, start_level=0,
              num_outs=3),
    bbox_head=dict(
        type='RetinaHead', num_classes=2, in_channels=32, stacked_convs=1, feat_channels=32,
        anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                              scales_per_octave=1, ratios=[1.0], strides=[8, 16, 32]),
        bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.0, 0.0, 0.0, 0.0],
                        target_stds=[1.0, 1.0, 1.0, 1.0]),
        loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=1.0),
        loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
    train_cfg=dict(
        assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4, min_pos_iou=0,
                      ignore_iof_thr=-1),
        allowed_border=-1, pos_weight=-1, debug=False),
    test_cfg=dict(nms_pre=100, min_bbox_size=0, score_thr=0.05,
                  nms=dict(type='nms', iou_threshold=0.5), max_per_img=10))

dataset_type = 'CocoDataset'
classes = ('car', 'pedestrian')  # CocoDataset otherwise looks up the 80 COCO names
data_root = os.environ.get('TINY_COCO_ROOT', 'data/tiny_coco/')
img_norm_cfg = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', img_scale=(64, 64), keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.0),
    dict(type='Normalize', **img_norm_cfg),
    dict(type='Pad', size_divisor=32),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels']),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='MultiScaleFlipAug', img_scale=(64, 64), flip=False,
         transforms=[
             dict(type='Resize', keep_ratio=True),
             dict(type='RandomFlip'),
             dict(type='Normalize', **img_norm_cfg),
             dict(type='Pad', size_divisor=32),
             dict(type='ImageToTensor', keys=['img']),
             dict(type='Collect', keys=['img']),
         ]),
]
data = dict(
    samples_per_gpu=1,
    workers_per_gpu=0,
    # shuffle=False: mmdet's InfiniteBatchSampler gives rank r of W the indices r, r+W, ...
    # in order, so with 2 ranks rank 0 reads the even images (pedestrian, branch runs) and
    # rank 1 the odd ones (branch skipped). The custom plugin trainer reads this key too.
    train_dataloader=dict(shuffle=False),
    train=dict(type=dataset_type, classes=classes, data_root=data_root,
               ann_file='annotations/train.json', img_prefix='images/',
               pipeline=train_pipeline),
    val=dict(type=dataset_type, classes=classes, data_root=data_root,
             ann_file='annotations/train.json', img_prefix='images/',
             pipeline=test_pipeline),
    test=dict(type=dataset_type, classes=classes, data_root=data_root,
              ann_file='annotations/train.json', img_prefix='images/',
              pipeline=test_pipeline))
# Registered only when validating (mmdet's tools/train.py does unless --no-validate); the
# interval is past max_iters, so it never runs.
evaluation = dict(interval=1000, metric='bbox')

optimizer = dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=1e-4)
optimizer_config = dict(grad_clip=None)
lr_config = dict(policy='fixed', by_epoch=False)
runner = dict(type='IterBasedRunner', max_iters=4)
checkpoint_config = dict(interval=4, by_epoch=False)
log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
custom_hooks = []
workflow = [('train', 1)]

dist_params = dict(backend='gloo')
log_level = 'INFO'
load_from = None
resume_from = None
opencv_num_threads = 0
mp_start_method = 'fork'
