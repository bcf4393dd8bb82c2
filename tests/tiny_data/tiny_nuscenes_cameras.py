"""The six cameras of nuScenes for the tiny nuScenes data: images and ``cam_instances``.

:func:`add_cameras` turns the LiDAR-only info file of :mod:`.tiny_nuscenes` into what
``update_infos_to_v2.py`` writes for a full nuScenes sample, so that mmdet3d's monocular
configs (FCOS3D, PGD: ``NuScenesDataset`` with ``load_type='mv_image_based'``) read the same
file as the LiDAR ones::

    samples/CAM_FRONT/<name>.jpg ... samples/CAM_BACK_LEFT/<name>.jpg   1600 x 900

Per frame, ``images[CAM]`` holds ``img_path`` (file name), ``cam2img`` (3x3),
``lidar2cam``, ``cam2ego`` (4x4), ``sample_data_token`` and ``timestamp``; and
``cam_instances[CAM]`` the objects whose centre that camera sees: ``bbox`` (2D, pixels),
``bbox_3d`` (camera coordinates, box centre, ``[x, y, z, l, h, w, yaw]``), labels,
``attr_label``, ``velocity`` (camera x and z), ``center_2d``, ``depth``,
``bbox_3d_isvalid``. The cameras ring the car at nuScenes' yaws, 0.3 m below the LiDAR.
"""
import os.path as osp
import pickle

import numpy as np

from tests.tiny_data.tiny_cameras import cam_instances, intrinsics, lidar2cam, write_image

WIDTH, HEIGHT, FOCAL = 1600, 900, 1266.0
CAMERAS = {'CAM_FRONT': 0.0, 'CAM_FRONT_RIGHT': -55.0, 'CAM_FRONT_LEFT': 55.0,
           'CAM_BACK': 180.0, 'CAM_BACK_LEFT': 110.0, 'CAM_BACK_RIGHT': -110.0}
CAMERA_OFFSET = (0.0, 0.0, -0.3)
# nuScenes attributes (NuScenesDataset's order): vehicle.moving (5), pedestrian.moving (2),
# vehicle.parked (6), cycle.without_rider (1), None (8).
ATTRIBUTES = {'car': 5, 'pedestrian': 2, 'truck': 6, 'trailer': 6, 'bus': 6,
              'construction_vehicle': 6, 'bicycle': 1, 'motorcycle': 1, 'traffic_cone': 8,
              'barrier': 8}


def add_cameras(root: str, info_file: str = 'nuscenes_infos_train.pkl', seed: int = 0):
    """Adds cameras and images to the tiny nuScenes infos under ``root`` (in place)."""
    from demo.tiny_nuscenes import CLASSES, LIDAR2EGO
    rng = np.random.default_rng(seed + 1000)
    path = osp.join(root, info_file)
    with open(path, 'rb') as f:
        infos = pickle.load(f)
    k = intrinsics(FOCAL, WIDTH, HEIGHT)
    for info in infos['data_list']:
        boxes = np.array([i['bbox_3d'] for i in info['instances']], dtype=np.float64)
        labels = [i['bbox_label_3d'] for i in info['instances']]
        if len(boxes):
            boxes[:, 2] -= boxes[:, 5] / 2  # mmdet3d's LiDAR boxes: z at the bottom
        velocities = [i['velocity'] for i in info['instances']]
        attrs = [ATTRIBUTES[CLASSES[label]] for label in labels]
        stamp = int(round(info['timestamp'] * 1e6))
        info['images'], info['cam_instances'] = {}, {}
        for cam, yaw in CAMERAS.items():
            extrinsic = lidar2cam(np.deg2rad(yaw), CAMERA_OFFSET)
            name = f'tiny-nuscenes__{cam}__{stamp}.jpg'
            write_image(rng, osp.join(root, 'samples', cam, name), WIDTH, HEIGHT)
            cam2ego = np.linalg.inv(extrinsic)
            cam2ego[:3, 3] += LIDAR2EGO
            info['images'][cam] = dict(
                img_path=name, cam2img=k.tolist(), lidar2cam=extrinsic.tolist(),
                cam2ego=cam2ego.tolist(), sample_data_token=f'{info["token"]}-{cam}',
                timestamp=info['timestamp'])
            info['cam_instances'][cam] = cam_instances(
                boxes, labels, extrinsic, k, WIDTH, HEIGHT, origin='gravity',
                velocities=velocities, attr_labels=attrs)
    with open(path, 'wb') as f:
        pickle.dump(infos, f)
    return path
