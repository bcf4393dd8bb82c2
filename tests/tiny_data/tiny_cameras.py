"""Synthetic pinhole cameras for the tiny datasets: poses, images, and the per-camera
instances (``cam_instances``) that mmdet3d's monocular and multi-view detectors read.

Camera coordinates are mmdet3d's (and KITTI's): x right, y down, z forward. A camera here
sits at the LiDAR origin plus a translation, looking horizontally along ``yaw`` (radians, 0
is the LiDAR's +x, counter-clockwise), so that ``lidar2cam`` is exact and simple.
"""
import os
import os.path as osp
from typing import Dict, List, Sequence

import mmcv
import numpy as np

from mmdet3d.structures import Box3DMode, LiDARInstance3DBoxes, points_cam2img


def lidar2cam(yaw: float, translation: Sequence[float] = (0.0, 0.0, 0.0)) -> np.ndarray:
    """4x4 LiDAR -> camera transform for a camera at ``translation`` (LiDAR frame) looking
    along ``yaw``."""
    forward = np.array([np.cos(yaw), np.sin(yaw), 0.0])
    right = np.array([np.sin(yaw), -np.cos(yaw), 0.0])
    down = np.array([0.0, 0.0, -1.0])
    rotation = np.stack([right, down, forward])
    matrix = np.eye(4)
    matrix[:3, :3] = rotation
    matrix[:3, 3] = -rotation @ np.asarray(translation, dtype=float)
    return matrix


def intrinsics(focal: float, width: int, height: int) -> np.ndarray:
    """3x3 pinhole matrix with the principal point at the image centre."""
    return np.array([[focal, 0.0, width / 2], [0.0, focal, height / 2], [0.0, 0.0, 1.0]])


def pad4(matrix: np.ndarray) -> np.ndarray:
    out = np.eye(4)
    rows, cols = matrix.shape
    out[:rows, :cols] = matrix
    return out


def write_image(rng: np.random.Generator, path: str, width: int, height: int,
                block: int = 32) -> None:
    """A colour image of random blocks (small on disk), written where mmdet3d reads it."""
    blocks = rng.integers(0, 256, (height // block + 1, width // block + 1, 3), dtype=np.uint8)
    image = blocks.repeat(block, 0).repeat(block, 1)[:height, :width]
    os.makedirs(osp.dirname(path), exist_ok=True)
    mmcv.imwrite(image, path)


def cam_instances(lidar_boxes: np.ndarray, labels: Sequence[int], cam: np.ndarray,
                  cam2img: np.ndarray, width: int, height: int, origin: str = 'gravity',
                  velocities: Sequence = None, attr_labels: Sequence[int] = None,
                  min_depth: float = 1.0) -> List[Dict]:
    """The objects one camera sees, as mmdet3d's converters write ``cam_instances``.

    Args:
        lidar_boxes: (N, 7) ``[x, y, z, l, w, h, yaw]`` in the LiDAR frame, z at the
            bottom of the box (mmdet3d's LiDAR box convention).
        cam: 4x4 lidar2cam. cam2img: 3x3 or 4x4 intrinsics.
        origin: ``'gravity'`` (nuScenes: ``bbox_3d`` holds the box centre) or ``'bottom'``
            (KITTI, Waymo: the bottom centre, mmdet3d's camera box default).
    """
    if len(lidar_boxes) == 0:
        return []
    boxes = LiDARInstance3DBoxes(np.asarray(lidar_boxes, dtype=np.float32))
    cam_boxes = boxes.convert_to(Box3DMode.CAM, rt_mat=cam)
    p = pad4(np.asarray(cam2img)[:3, :3])
    centers = cam_boxes.gravity_center.numpy()
    centers_2d = points_cam2img(centers, p, with_depth=True)
    corners = points_cam2img(cam_boxes.corners.numpy().reshape(-1, 3), p).reshape(-1, 8, 2)
    corner_depth = cam_boxes.corners.numpy()[..., 2]
    out = []
    for i in range(len(boxes)):
        u, v, depth = centers_2d[i]
        if depth < min_depth or (corner_depth[i] <= 0.1).any():
            continue
        if not (0 <= u < width and 0 <= v < height):
            continue
        x1, y1 = np.clip(corners[i].min(0), 0, [width - 1, height - 1])
        x2, y2 = np.clip(corners[i].max(0), 0, [width - 1, height - 1])
        if x2 - x1 < 2 or y2 - y1 < 2:
            continue
        tensor = cam_boxes.tensor[i].numpy()
        xyz = centers[i] if origin == 'gravity' else tensor[:3]
        box = [float(v) for v in list(xyz) + list(tensor[3:7])]
        entry = dict(bbox=[float(x1), float(y1), float(x2), float(y2)],
                     bbox_label=int(labels[i]), bbox_3d=box, bbox_3d_isvalid=True,
                     bbox_label_3d=int(labels[i]), center_2d=[float(u), float(v)],
                     depth=float(depth))
        if velocities is not None:
            vx, vy = velocities[i]
            velocity = cam[:3, :3] @ np.array([vx, vy, 0.0])
            entry['velocity'] = [float(velocity[0]), float(velocity[2])]
        if attr_labels is not None:
            entry['attr_label'] = int(attr_labels[i])
        out.append(entry)
    return out
