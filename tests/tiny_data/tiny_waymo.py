"""A tiny, deterministic Waymo dataset in MMDetection3D 1.4's KITTI-format on-disk layout.

What ``tools/create_data.py waymo`` writes in mmdet3d 1.4 (``data/waymo/kitti_format``) and
mmdet3d's ``WaymoDataset`` reads, for LiDAR (PointPillars), monocular (PGD, ``load_type``
``fov_image_based`` / ``mv_image_based``) and multi-view (MV-FCOS3D, ``cam_sync_instances``)
configs::

    root/
      training/velodyne/<idx>.bin      float32 x, y, z, intensity, elongation, timestamp
      training/image_0/<idx>.jpg       CAM_FRONT, 1920 x 1280
      training/image_1 ... image_4     CAM_FRONT_LEFT, CAM_FRONT_RIGHT (1920 x 1280),
                                       CAM_SIDE_LEFT, CAM_SIDE_RIGHT (1920 x 886)
      waymo_infos_train.pkl            dict(metainfo=..., data_list=[...])

Per frame: ``sample_idx``, ``context_name``, ``timestamp``, ``ego2global``; ``images[CAM]``
with ``img_path``, ``height``, ``width``, ``cam2img`` (4x4), ``lidar2cam``, ``lidar2img``;
``lidar_points`` (``lidar_path``, ``num_pts_feats`` 6); ``instances`` and
``cam_sync_instances`` in the LiDAR frame (``[x, y, z_bottom, l, w, h, yaw]``, read with
``LiDARInstance3DBoxes``' default origin) with KITTI's per-object fields; and
``cam_instances[CAM]`` in each camera's coordinates (bottom centre, the camera box default).

The scene, in the vehicle frame as Waymo stores points (ground at z = 0, cameras 2 m up):
cars, pedestrians and cyclists all around within 30 m, every object filled with points;
the rest a noisy ground plane.
"""
import os
import os.path as osp
import pickle

import numpy as np

from tests.tiny_data.tiny_cameras import cam_instances, intrinsics, lidar2cam, pad4, write_image

CLASSES = ('Car', 'Pedestrian', 'Cyclist')
SIZES = {'Car': (4.5, 2.0, 1.6), 'Pedestrian': (0.8, 0.8, 1.8), 'Cyclist': (1.8, 0.7, 1.8)}
POINTS = {'Car': 200, 'Pedestrian': 50, 'Cyclist': 60}
FRAME_OBJECTS = ('Car', 'Car', 'Pedestrian', 'Cyclist', 'Car', 'Pedestrian')
GROUND_Z = 0.0  # the vehicle frame: Waymo points have the ground at z = 0
GROUND_POINTS = 3000
# name, folder, yaw (degrees), width, height
CAMERAS = [('CAM_FRONT', 'image_0', 0.0, 1920, 1280),
           ('CAM_FRONT_LEFT', 'image_1', 45.0, 1920, 1280),
           ('CAM_FRONT_RIGHT', 'image_2', -45.0, 1920, 1280),
           ('CAM_SIDE_LEFT', 'image_3', 90.0, 1920, 886),
           ('CAM_SIDE_RIGHT', 'image_4', -90.0, 1920, 886)]
FOCAL = 2055.0
CAMERA_OFFSET = (1.5, 0.0, 2.0)


def _objects(rng):
    boxes, labels = [], []
    for slot, name in enumerate(FRAME_OBJECTS):
        # Spread over all directions, so that every camera sees something most frames.
        angle = np.deg2rad(slot * 360 / len(FRAME_OBJECTS) + rng.uniform(-20, 20))
        distance = rng.uniform(8, 30)
        length, width, height = SIZES[name]
        boxes.append([distance * np.cos(angle), distance * np.sin(angle), GROUND_Z, length,
                      width, height, rng.uniform(-np.pi, np.pi)])
        labels.append(CLASSES.index(name))
    return np.array(boxes), labels


def _points(rng, boxes, labels):
    ground = np.stack([rng.uniform(-60, 60, GROUND_POINTS), rng.uniform(-60, 60, GROUND_POINTS),
                       rng.normal(GROUND_Z, 0.03, GROUND_POINTS)], axis=1)
    parts, counts = [ground], []
    for box, label in zip(boxes, labels):
        x, y, z, length, width, height, yaw = box
        n = POINTS[CLASSES[label]]
        local = rng.uniform(-0.45, 0.45, (n, 3)) * [length, width, height]
        parts.append(np.stack([x + local[:, 0] * np.cos(yaw) - local[:, 1] * np.sin(yaw),
                               y + local[:, 0] * np.sin(yaw) + local[:, 1] * np.cos(yaw),
                               z + height / 2 + local[:, 2]], axis=1))
        counts.append(n)
    xyz = np.concatenate(parts)
    extra = np.stack([rng.uniform(0, 1, len(xyz)), rng.uniform(0, 0.5, len(xyz)),
                      np.zeros(len(xyz))], axis=1)
    return np.concatenate([xyz, extra], axis=1).astype(np.float32), counts


def make_tiny_waymo(root: str, num_frames: int = 8, seed: int = 0) -> str:
    """Writes ``num_frames`` frames under ``root``; returns the path of the train infos."""
    rng = np.random.default_rng(seed)
    os.makedirs(osp.join(root, 'training', 'velodyne'), exist_ok=True)
    data_list = []
    for frame in range(num_frames):
        idx = 1000000 + frame
        name = f'{idx:07d}'
        boxes, labels = _objects(rng)
        points, counts = _points(rng, boxes, labels)
        points.tofile(osp.join(root, 'training', 'velodyne', f'{name}.bin'))
        images, per_cam = {}, {}
        for cam, folder, yaw, width, height in CAMERAS:
            extrinsic = lidar2cam(np.deg2rad(yaw), CAMERA_OFFSET)
            k = pad4(intrinsics(FOCAL, width, height))
            write_image(rng, osp.join(root, 'training', folder, f'{name}.jpg'), width, height)
            images[cam] = dict(img_path=f'{name}.jpg', height=height, width=width,
                               cam2img=k.tolist(), lidar2cam=extrinsic.tolist(),
                               lidar2img=(k @ extrinsic).tolist())
            per_cam[cam] = cam_instances(boxes, labels, extrinsic, k, width, height,
                                         origin='bottom')
            for index, instance in enumerate(per_cam[cam]):
                instance.update(index=index, group_id=index, truncated=0.0, occluded=0,
                                difficulty=0, score=0.0, alpha=-10.0)
        instances = []
        for index, (box, label, count) in enumerate(zip(boxes, labels, counts)):
            instances.append(dict(
                bbox=[0.0, 0.0, 0.0, 0.0], bbox_label=label, bbox_3d=box.tolist(),
                bbox_label_3d=label, num_lidar_pts=count, difficulty=0, truncated=0.0,
                occluded=0, alpha=-10.0, score=0.0, index=index, group_id=index,
                camera_id=0))
        data_list.append(dict(
            sample_idx=idx, context_name='tiny-waymo-segment', timestamp=1550000000000000
            + frame * 100000, ego2global=np.eye(4).tolist(), images=images,
            lidar_points=dict(num_pts_feats=6, lidar_path=f'{name}.bin'),
            instances=instances, cam_sync_instances=[dict(i) for i in instances],
            cam_instances=per_cam))
    metainfo = dict(categories={name: i for i, name in enumerate(CLASSES)}, dataset='waymo',
                    version='1.4', info_version='1.1')
    info_path = osp.join(root, 'waymo_infos_train.pkl')
    with open(info_path, 'wb') as f:
        pickle.dump(dict(metainfo=metainfo, data_list=data_list), f)
    return info_path
