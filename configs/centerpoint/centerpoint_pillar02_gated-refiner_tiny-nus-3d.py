# mmdet3d's CenterPoint (pillar 0.2 m, SECOND + SECFPN, nuScenes, 10 classes), unchanged
# except for two things: the custom layer of `CenterPointWithGatedRefiner` (a refiner block
# that runs only for batches with a pedestrian, so it goes unused on some ranks in some
# iterations), and tiny synthetic nuScenes data trained for 4 iterations on 2 CPU ranks.
# Make the data first, from the repo root (the working directory for training):
#   python -m demo.make_tiny_data   (from the repository root)
# Frames 0, 3, 4, 7 hold pedestrians: with 2 ranks, batch size 1 and no shuffling, exactly
# one rank runs the refiner in each iteration. GuardedDDP trains it and logs which parameters
# went unused where. Plain DDP (find_unused_parameters=False) dies at the start of the second
# iteration with "Expected to have finished reduction in the prior iteration".
_base_ = [
    'mmdet3d::centerpoint/centerpoint_pillar02_second_secfpn_8xb4-cyclic-20e_nus-3d.py',
    '../_base_/ddp_guard.py', '../_base_/schedules/tiny_run.py'
]
custom_imports = dict(
    imports=['mmdet3d_ddp_guard', 'demo.custom_layers'],
    allow_failed_imports=False)

model = dict(type='CenterPointWithGatedRefiner', gate_class=8)  # 8: 'pedestrian' below

# The same values as in mmdet3d's config.
point_cloud_range = [-51.2, -51.2, -5.0, 51.2, 51.2, 3.0]
class_names = [
    'car', 'truck', 'construction_vehicle', 'bus', 'trailer', 'barrier',
    'motorcycle', 'bicycle', 'pedestrian', 'traffic_cone'
]
data_prefix = dict(pts='samples/LIDAR_TOP', img='', sweeps='sweeps/LIDAR_TOP')
dataset_type = 'NuScenesDataset'
data_root = 'data/tiny/nuscenes/'
backend_args = None

# mmdet3d's train pipeline without ObjectSample (it pastes objects from a ground-truth
# database, which the tiny data has none of) and with 2 sweeps instead of 9 (the tiny
# data has 2 per frame).
train_pipeline = [
    dict(step, sweeps_num=2) if step['type'] == 'LoadPointsFromMultiSweeps' else step
    for step in _base_.train_pipeline if step['type'] != 'ObjectSample'
]

# mmdet3d's dataset, without its CBGSDataset wrapper (class-balanced resampling would
# reorder the frames at random and lose the per-rank pattern of pedestrians) and without
# shuffling; batch size 1, in the main process.
train_dataloader = dict(
    _delete_=True,
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        ann_file='nuscenes_infos_train.pkl',
        pipeline=train_pipeline,
        metainfo=dict(classes=class_names),
        test_mode=False,
        data_prefix=data_prefix,
        use_valid_flag=True,
        box_type_3d='LiDAR',
        backend_args=backend_args))

# The short run shared by the examples: 4 iterations, a log line each, no validation
# (why it is applied this way: configs/_base_/schedules/tiny_run.py).
globals().update(_base_.pop('tiny_run'))
