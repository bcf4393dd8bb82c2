"""A tiny synthetic dataset in MMDetection3D 1.4's own on-disk nuScenes format.

Enough for mmdet3d's unchanged ``NuScenesDataset`` and CenterPoint's LiDAR pipeline
(``LoadPointsFromFile``, ``LoadPointsFromMultiSweeps``, ``LoadAnnotations3D``, the
augmentations and filters) to train a few iterations on a CPU, with a known pattern of
pedestrian boxes (see :func:`has_pedestrians`). Layout under ``root``::

    samples/LIDAR_TOP/<name>.pcd.bin   key frames
    sweeps/LIDAR_TOP/<name>.pcd.bin    SWEEPS_PER_FRAME earlier scans per key frame
    nuscenes_infos_train.pkl

Point clouds are float32 ``.bin`` files with 5 values per point, as nuScenes stores them:
x, y, z (metres, LiDAR frame), intensity, ring index (``LoadPointsFromMultiSweeps``
replaces the fifth value by the time lag of the sweep).

The info file is what ``tools/dataset_converters/update_infos_to_v2.py`` writes: a dict
with ``metainfo`` (``categories`` in the order of ``NuScenesDataset.METAINFO['classes']``,
``dataset``, ``version``, ``info_version``) and ``data_list``; one entry per key frame
with ``sample_idx``, ``token``, ``timestamp`` (seconds), ``ego2global`` (4x4),
``lidar_points`` (``lidar_path`` as a file name, ``num_pts_feats``, ``lidar2ego``),
``lidar_sweeps`` (per sweep: ``timestamp``, ``ego2global``, ``sample_data_token`` and
``lidar_points`` with ``lidar_path``, ``lidar2ego``, ``lidar2sensor``) and ``instances``
(per box: ``bbox_3d`` = [x, y, z, dx, dy, dz, yaw] in the LiDAR frame with z at the box
centre, ``bbox_label`` / ``bbox_label_3d``, ``velocity`` [vx, vy], ``num_lidar_pts``,
``num_radar_pts``, ``bbox_3d_isvalid``). There are no cameras, so no ``images`` or
``cam_instances``.

The scene: the ego vehicle drives along x at EGO_SPEED over flat ground, every frame has
one or two cars and some frames also have pedestrians (with ``every_class``, also one parked
object of another class); every box holds a cluster of points.
Sweeps see the same static scene from the earlier ego positions, so that mmdet3d's
``lidar2sensor`` transform puts their points back in place.
"""
import os
import os.path as osp
import pickle
from typing import Dict, List

import numpy as np

# NuScenesDataset.METAINFO['classes']: the label order of info files (configs may reorder).
CLASSES = ('car', 'truck', 'trailer', 'bus', 'construction_vehicle', 'bicycle',
           'motorcycle', 'pedestrian', 'traffic_cone', 'barrier')
SWEEPS_PER_FRAME = 2
KEYFRAME_PERIOD = 0.5  # s, nuScenes annotates at 2 Hz
SWEEP_PERIOD = 0.05  # s, the LiDAR spins at 20 Hz
EGO_SPEED = 5.0  # m/s along x
GROUND_Z = -1.84  # the LiDAR is mounted 1.84 m above the ground
LIDAR2EGO = [0.94, 0.0, 1.84]  # translation only
FIRST_TIMESTAMP_US = 1_533_201_470_448_696
# (length, width, height), about nuScenes' mean sizes; points put inside each box
SIZES = {'car': (4.5, 1.9, 1.6), 'pedestrian': (0.7, 0.7, 1.75),
         'truck': (6.9, 2.5, 2.8), 'trailer': (12.0, 2.9, 3.9), 'bus': (11.0, 2.9, 3.5),
         'construction_vehicle': (6.4, 2.8, 3.2), 'bicycle': (1.7, 0.6, 1.3),
         'motorcycle': (2.1, 0.8, 1.5), 'traffic_cone': (0.4, 0.4, 1.1),
         'barrier': (0.5, 2.5, 1.0)}
POINTS_PER_BOX = {name: 60 if min(size[:2]) > 1.5 else 20 for name, size in SIZES.items()}
#: With ``every_class``, frame f also holds one object of OTHER_CLASSES[f % 8], so that
#: every class has boxes: ``CBGSDataset`` (CenterPoint's configs) divides by each class's
#: count.
OTHER_CLASSES = tuple(c for c in CLASSES if c not in ('car', 'pedestrian'))


def has_pedestrians(frame: int) -> bool:
    """Frames 0, 3, 4, 7, 8, ...: with 2 ranks, batch size 1 and no shuffling (rank r reads
    frames r, r + 2, ...), exactly one rank sees pedestrians in every iteration, rank 0 in
    even iterations and rank 1 in odd ones."""
    return frame % 4 in (0, 3)


def _pose(translation: List[float]) -> List[List[float]]:
    matrix = np.eye(4)
    matrix[:3, 3] = translation
    return matrix.tolist()


def _box(rng: np.random.Generator, name: str, x: float, y: float) -> np.ndarray:
    length, width, height = SIZES[name]
    return np.array([x, y, GROUND_Z + height / 2, length, width, height,
                     rng.uniform(-np.pi, np.pi)])


def _points_in_box(rng: np.random.Generator, box: np.ndarray, count: int) -> np.ndarray:
    local = rng.uniform(-0.45, 0.45, size=(count, 3)) * box[3:6]
    cos, sin = np.cos(box[6]), np.sin(box[6])
    xyz = np.stack([cos * local[:, 0] - sin * local[:, 1],
                    sin * local[:, 0] + cos * local[:, 1], local[:, 2]], axis=1)
    return xyz + box[:3]


def _count_in_box(xyz: np.ndarray, box: np.ndarray) -> int:
    shifted = xyz - box[:3]
    cos, sin = np.cos(box[6]), np.sin(box[6])
    local = np.stack([cos * shifted[:, 0] + sin * shifted[:, 1],
                      -sin * shifted[:, 0] + cos * shifted[:, 1], shifted[:, 2]], axis=1)
    return int((np.abs(local) <= box[3:6] / 2).all(axis=1).sum())


def _frame_objects(rng: np.random.Generator, frame: int, every_class: bool) -> List[tuple]:
    """(name, box, velocity) of the frame's objects, all within 25 m of the LiDAR."""
    objects = []
    for _ in range(1 + frame % 2):
        objects.append(('car', _box(rng, 'car', rng.uniform(-25, 25), rng.uniform(-25, 25)),
                        [rng.uniform(-8, 8), rng.uniform(-1, 1)]))
    if has_pedestrians(frame):
        for _ in range(1 + frame % 2):
            objects.append(('pedestrian', _box(rng, 'pedestrian', rng.uniform(3, 15),
                                               rng.uniform(-15, 15)),
                            [rng.uniform(-1.5, 1.5), rng.uniform(-1.5, 1.5)]))
    if every_class:
        name = OTHER_CLASSES[frame % len(OTHER_CLASSES)]
        objects.append((name, _box(rng, name, rng.uniform(-25, 25), rng.uniform(-25, 25)),
                        [0.0, 0.0]))
    return objects


def _scan(rng: np.random.Generator, boxes: List[np.ndarray], names: List[str],
          num_points: int) -> np.ndarray:
    """Ground points around the LiDAR plus a cluster of points in every box."""
    clusters = [_points_in_box(rng, box, POINTS_PER_BOX[name])
                for box, name in zip(boxes, names)]
    num_ground = max(num_points - sum(len(c) for c in clusters), 0)
    ground = np.column_stack([rng.uniform(-50, 50, size=(num_ground, 2)),
                              GROUND_Z - rng.uniform(0, 0.05, size=num_ground)])
    xyz = np.concatenate([ground, *clusters])
    intensity = rng.uniform(0, 100, size=len(xyz))
    ring = rng.integers(0, 32, size=len(xyz))
    return np.column_stack([xyz, intensity, ring]).astype(np.float32)


def _write(path: str, points: np.ndarray) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    points.tofile(path)


def _frame_info(rng: np.random.Generator, root: str, frame: int, num_points: int,
                every_class: bool) -> Dict:
    timestamp_us = FIRST_TIMESTAMP_US + round(frame * KEYFRAME_PERIOD * 1e6)
    ego_x = 600.0 + EGO_SPEED * frame * KEYFRAME_PERIOD
    objects = _frame_objects(rng, frame, every_class)
    names = [name for name, _, _ in objects]
    boxes = [box for _, box, _ in objects]
    points = _scan(rng, boxes, names, num_points)
    lidar_name = f'tiny-nuscenes__LIDAR_TOP__{timestamp_us}.pcd.bin'
    _write(osp.join(root, 'samples', 'LIDAR_TOP', lidar_name), points)

    sweeps = []
    for k in range(1, SWEEPS_PER_FRAME + 1):
        lag = k * SWEEP_PERIOD
        sweep_name = f'tiny-nuscenes__LIDAR_TOP__{timestamp_us - round(lag * 1e6)}.pcd.bin'
        # The same static scene, seen from where the ego vehicle was `lag` seconds ago.
        shift = EGO_SPEED * lag
        sweep_points = points.copy()
        sweep_points[:, 0] += shift
        _write(osp.join(root, 'sweeps', 'LIDAR_TOP', sweep_name), sweep_points)
        sweeps.append(dict(
            timestamp=timestamp_us / 1e6 - lag,
            ego2global=_pose([ego_x - shift, 1600.0, 0.0]),
            sample_data_token=f'{frame:016x}{k:016x}',
            lidar_points=dict(lidar_path=f'sweeps/LIDAR_TOP/{sweep_name}',
                              lidar2ego=_pose(LIDAR2EGO),
                              lidar2sensor=_pose([shift, 0.0, 0.0]))))

    instances = []
    for name, box, velocity in objects:
        label = CLASSES.index(name)
        instances.append(dict(
            bbox_label=label, bbox_3d=box.tolist(), bbox_3d_isvalid=True,
            bbox_label_3d=label, num_lidar_pts=_count_in_box(points[:, :3], box),
            num_radar_pts=0, velocity=velocity))
    return dict(
        sample_idx=frame,
        token=f'{frame:032x}',
        timestamp=timestamp_us / 1e6,
        ego2global=_pose([ego_x, 1600.0, 0.0]),
        lidar_points=dict(num_pts_feats=5, lidar_path=lidar_name, lidar2ego=_pose(LIDAR2EGO)),
        lidar_sweeps=sweeps,
        instances=instances)


def make_tiny_nuscenes(root: str, num_frames: int = 8, points_per_frame: int = 4000,
                       seed: int = 0, every_class: bool = False) -> str:
    """Writes ``num_frames`` key frames (and their sweeps) and the info file under ``root``;
    returns the info file's path. The same arguments give the same files. ``every_class``
    adds one parked object of another class per frame (see OTHER_CLASSES)."""
    rng = np.random.default_rng(seed)
    data_list = [_frame_info(rng, root, frame, points_per_frame, every_class)
                 for frame in range(num_frames)]
    metainfo = dict(categories={name: i for i, name in enumerate(CLASSES)},
                    dataset='nuscenes', version='v1.0-mini', info_version='1.1')
    info_path = osp.join(root, 'nuscenes_infos_train.pkl')
    with open(info_path, 'wb') as f:
        pickle.dump(dict(metainfo=metainfo, data_list=data_list), f)
    return info_path
