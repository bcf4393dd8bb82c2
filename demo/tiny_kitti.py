"""A tiny, deterministic KITTI dataset in MMDetection3D 1.4's own on-disk format.

Real KITTI cannot be downloaded here, so ``make_tiny_kitti`` writes what mmdet3d's
``KittiDataset`` reads after ``tools/create_data.py kitti``, with the same names::

    root/
      kitti_infos_train.pkl        v2 infos: dict(metainfo=..., data_list=[...])
      training/velodyne/000000.bin          float32 (x, y, z, intensity) in LiDAR coords
      training/velodyne_reduced/000000.bin  the points inside CAM2's field of view
      training/image_2/000000.png           1242 x 375 colour image (optional)

Each ``data_list`` entry is built as ``tools/dataset_converters/update_infos_to_v2.py``
builds it from a KITTI frame:

* ``images``: ``CAM0``..``CAM3`` with ``cam2img`` (P0..P3 padded to 4x4) and ``lidar2img``;
  ``CAM2``, the only camera with images, also has ``img_path``, ``height``, ``width`` and
  ``lidar2cam`` (``R0_rect @ Tr_velo_to_cam``); ``R0_rect`` sits next to the cameras.
* ``lidar_points``: ``lidar_path``, ``num_pts_feats`` (4), ``Tr_velo_to_cam``,
  ``Tr_imu_to_velo``.
* ``instances``: per object ``bbox`` (2D box in image_2), ``bbox_3d`` (camera coordinates,
  bottom centre, ``[x, y, z, l, h, w, rotation_y]``), labels, ``depth`` and ``center_2d``
  (the projected gravity centre), ``num_lidar_pts``, KITTI ``difficulty``, ``truncated``,
  ``occluded``, ``alpha``, ``score``, ``index`` and ``group_id``.
* ``cam_instances['CAM2']``: the same objects as monocular 3D detectors read them
  (``load_type='fov_image_based'``).

The calibration is that of a real KITTI drive (2011_09_26). Every frame holds two cars, a
pedestrian and a cyclist standing on the ground in front of the car, inside every KITTI
point cloud range, with LiDAR points on them; the rest of the cloud is a noisy ground plane.
"""
import os
import os.path as osp

import mmcv
import mmengine
import numpy as np
from mmdet3d.structures import Box3DMode, CameraInstance3DBoxes, points_cam2img

CLASSES = ('Pedestrian', 'Cyclist', 'Car', 'Van', 'Truck', 'Person_sitting', 'Tram',
           'Misc')
IMAGE_HEIGHT, IMAGE_WIDTH = 375, 1242
LIDAR_HEIGHT = 1.73  # metres above the ground; the ground is at z = -1.73 in LiDAR coords

# name: (length, width, height) in metres, LiDAR points on the object
OBJECTS = {'Car': ((3.9, 1.6, 1.56), 300), 'Pedestrian': ((0.8, 0.6, 1.73), 60),
           'Cyclist': ((1.76, 0.6, 1.73), 80)}
FRAME_OBJECTS = ('Car', 'Pedestrian', 'Car', 'Cyclist')
GROUND_POINTS = 2000


def _pad(matrix):
    """KITTI's 3x4 / 3x3 calibration matrices as the 4x4 ones mmdet3d stores."""
    padded = np.eye(4)
    rows, cols = np.shape(matrix)
    padded[:rows, :cols] = matrix
    return padded


P = [_pad(np.reshape(values, (3, 4))) for values in (
    [721.5377, 0, 609.5593, 0, 0, 721.5377, 172.854, 0, 0, 0, 1, 0],
    [721.5377, 0, 609.5593, -387.5744, 0, 721.5377, 172.854, 0, 0, 0, 1, 0],
    [721.5377, 0, 609.5593, 44.85728, 0, 721.5377, 172.854, 0.2163791, 0, 0, 1,
     0.002745884],
    [721.5377, 0, 609.5593, -339.5242, 0, 721.5377, 172.854, 2.199936, 0, 0, 1,
     0.002729905])]
R0_RECT = _pad(np.reshape([0.9999239, 0.00983776, -0.007445048, -0.009869795, 0.9999421,
                           -0.004278459, 0.007402527, 0.004351614, 0.9999631], (3, 3)))
TR_VELO_TO_CAM = _pad(np.reshape([0.007533745, -0.9999714, -0.000616602, -0.004069766,
                                  0.01480249, 0.0007280733, -0.9998902, -0.07631618,
                                  0.9998621, 0.00752379, 0.01480755, -0.2717806], (3, 4)))
TR_IMU_TO_VELO = _pad(np.reshape([0.9999976, 0.0007553071, -0.002035826, -0.8086759,
                                  -0.0007854027, 0.9998898, -0.01482298, 0.3195559,
                                  0.002024406, 0.01482454, 0.9998881, -0.7997231], (3, 4)))
LIDAR2CAM = R0_RECT @ TR_VELO_TO_CAM


def _place_objects(rng):
    """LiDAR boxes ``(x, y, z_bottom, length, width, height, yaw)``, one per 9 m of road."""
    boxes = []
    for slot, name in enumerate(FRAME_OBJECTS):
        x = 8 + 9 * slot + rng.uniform(0, 5)
        y = rng.uniform(-0.3, 0.3) * x
        boxes.append([x, y, -LIDAR_HEIGHT, *OBJECTS[name][0], rng.uniform(-np.pi, np.pi)])
    return np.array(boxes)


def _in_box(points, box):
    """Mask of the points inside one LiDAR box."""
    x, y, z, length, width, height, yaw = box
    dx, dy = points[:, 0] - x, points[:, 1] - y
    along = dx * np.cos(yaw) + dy * np.sin(yaw)
    across = -dx * np.sin(yaw) + dy * np.cos(yaw)
    return ((np.abs(along) <= length / 2) & (np.abs(across) <= width / 2)
            & (points[:, 2] >= z) & (points[:, 2] <= z + height))


def _point_cloud(rng, boxes):
    """A noisy ground plane (also behind the car) and points filling every object."""
    ground = np.stack([rng.uniform(-20, 70, GROUND_POINTS),
                       rng.uniform(-40, 40, GROUND_POINTS),
                       rng.normal(-LIDAR_HEIGHT, 0.03, GROUND_POINTS)], axis=1)
    parts = [ground]
    for name, box in zip(FRAME_OBJECTS, boxes):
        x, y, z, length, width, height, yaw = box
        local = rng.uniform(-0.5, 0.5, (OBJECTS[name][1], 3)) * [length, width, height]
        parts.append(np.stack([x + local[:, 0] * np.cos(yaw) - local[:, 1] * np.sin(yaw),
                               y + local[:, 0] * np.sin(yaw) + local[:, 1] * np.cos(yaw),
                               z + height / 2 + local[:, 2]], axis=1))
    xyz = np.concatenate(parts)
    return np.concatenate([xyz, rng.uniform(0, 1, (len(xyz), 1))], axis=1).astype(np.float32)


def _in_camera_view(points):
    """What ``create_data.py`` keeps in ``velodyne_reduced``: points seen by CAM2."""
    uvd = points_cam2img((LIDAR2CAM @ np.c_[points[:, :3], np.ones(len(points))].T).T[:, :3],
                         P[2], with_depth=True)
    return ((uvd[:, 2] > 0) & (uvd[:, 0] >= 0) & (uvd[:, 0] < IMAGE_WIDTH)
            & (uvd[:, 1] >= 0) & (uvd[:, 1] < IMAGE_HEIGHT))


def _difficulty(bbox_height, occluded, truncated):
    """KITTI's easy (0) / moderate (1) / hard (2) rules; -1 when none applies."""
    for level, (min_height, max_occluded, max_truncated) in enumerate(
            [(40, 0, 0.15), (25, 1, 0.3), (25, 2, 0.5)]):
        if (bbox_height >= min_height and occluded <= max_occluded
                and truncated <= max_truncated):
            return level
    return -1


def _instances(lidar_boxes, points):
    """The ``instances`` and ``cam_instances['CAM2']`` entries of one frame."""
    cam_boxes = Box3DMode.convert(lidar_boxes, Box3DMode.LIDAR, Box3DMode.CAM,
                                  rt_mat=LIDAR2CAM)
    boxes = CameraInstance3DBoxes(cam_boxes)
    corners = points_cam2img(boxes.corners.numpy().reshape(-1, 3), P[2]).reshape(-1, 8, 2)
    centers = points_cam2img(boxes.gravity_center.numpy(), P[2], with_depth=True)
    instances, cam_instances = [], []
    for index, (name, lidar_box, cam_box) in enumerate(zip(FRAME_OBJECTS, lidar_boxes,
                                                           cam_boxes)):
        label = CLASSES.index(name)
        x1, y1 = np.clip(corners[index].min(0), 0, [IMAGE_WIDTH, IMAGE_HEIGHT])
        x2, y2 = np.clip(corners[index].max(0), 0, [IMAGE_WIDTH, IMAGE_HEIGHT])
        bbox = [float(x1), float(y1), float(x2), float(y2)]
        alpha = cam_box[6] - np.arctan2(cam_box[0], cam_box[2])
        common = dict(bbox=bbox, bbox_label=label, bbox_3d=cam_box.tolist(),
                      bbox_label_3d=label, depth=float(centers[index, 2]),
                      center_2d=centers[index, :2].tolist())
        instances.append(dict(
            common, num_lidar_pts=int(_in_box(points, lidar_box).sum()),
            difficulty=_difficulty(y2 - y1, 0, 0.0), truncated=0.0, occluded=0,
            alpha=float((alpha + np.pi) % (2 * np.pi) - np.pi), score=0.0, index=index,
            group_id=index))
        cam_instances.append(dict(common, bbox_3d_isvalid=True, velocity=-1))
    return instances, cam_instances


def _image(rng):
    """A random colour image of blocks of 8x8 pixels (small as a PNG)."""
    blocks = rng.integers(0, 256, (IMAGE_HEIGHT // 8 + 1, IMAGE_WIDTH // 8 + 1, 3),
                          dtype=np.uint8)
    return blocks.repeat(8, 0).repeat(8, 1)[:IMAGE_HEIGHT, :IMAGE_WIDTH]


def _frame_info(index, instances, cam_instances):
    name = f'{index:06d}'
    images = {f'CAM{cam}': dict(cam2img=P[cam].tolist(),
                                lidar2img=(P[cam] @ LIDAR2CAM).tolist()) for cam in range(4)}
    images['CAM2'].update(img_path=f'{name}.png', height=IMAGE_HEIGHT, width=IMAGE_WIDTH,
                          lidar2cam=LIDAR2CAM.tolist())
    images['R0_rect'] = R0_RECT.tolist()
    return dict(sample_idx=index, images=images,
                lidar_points=dict(num_pts_feats=4, lidar_path=f'{name}.bin',
                                  Tr_velo_to_cam=TR_VELO_TO_CAM.tolist(),
                                  Tr_imu_to_velo=TR_IMU_TO_VELO.tolist()),
                instances=instances, cam_instances=dict(CAM2=cam_instances))


def make_tiny_kitti(root: str, num_frames: int = 8, seed: int = 0,
                    with_images: bool = True) -> str:
    """Write ``num_frames`` frames under ``root``; returns the path of the train infos."""
    rng = np.random.default_rng(seed)
    for folder in ('velodyne', 'velodyne_reduced') + (('image_2',) if with_images else ()):
        os.makedirs(osp.join(root, 'training', folder), exist_ok=True)
    data_list = []
    for index in range(num_frames):
        boxes = _place_objects(rng)
        points = _point_cloud(rng, boxes)
        reduced = points[_in_camera_view(points)]
        name = f'{index:06d}'
        points.tofile(osp.join(root, 'training', 'velodyne', f'{name}.bin'))
        reduced.tofile(osp.join(root, 'training', 'velodyne_reduced', f'{name}.bin'))
        image = _image(rng)  # drawn either way: the frames do not depend on with_images
        if with_images:
            mmcv.imwrite(image, osp.join(root, 'training', 'image_2', f'{name}.png'))
        data_list.append(_frame_info(index, *_instances(boxes, reduced)))
    info_path = osp.join(root, 'kitti_infos_train.pkl')
    mmengine.dump(dict(metainfo=dict(categories={name: i for i, name in enumerate(CLASSES)},
                                     dataset='kitti', info_version='1.1'),
                       data_list=data_list), info_path)
    return info_path
