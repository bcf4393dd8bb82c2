"""A tiny, deterministic SUN RGB-D dataset in MMDetection3D 1.4's own on-disk format.

What ``tools/create_data.py sunrgbd`` (then ``update_infos_to_v2.py``) writes and mmdet3d's
``SUNRGBDDataset`` reads with its default ``data_prefix``::

    root/
      points/<idx>.bin                      float32 x, y, z, r, g, b (depth coordinates:
                                            x right, y forward, z up, metres)
      sunrgbd_trainval/image/<idx>.jpg      730 x 530 colour image
      sunrgbd_infos_train.pkl               dict(metainfo=..., data_list=[...])

Per frame: ``sample_idx``, ``lidar_points`` (``lidar_path``, ``num_pts_feats`` 6),
``images['CAM0']`` (``img_path``, ``height``, ``width``, ``depth2img`` 4x4) and
``instances``: ``bbox_3d`` (depth coordinates, box centre, ``[x, y, z, dx, dy, dz,
yaw]``), ``bbox_label_3d``, and the projected 2D ``bbox`` with ``bbox_label`` (what
ImVoteNet's image stage trains on). Every frame: a bed, a table and a chair on the floor
in front of the camera (1.2 m above the floor), filled with points; the rest a noisy floor
and back wall.
"""
import os
import os.path as osp
import pickle

import numpy as np

from tests.tiny_data.tiny_cameras import pad4, write_image

CLASSES = ('bed', 'table', 'sofa', 'chair', 'toilet', 'desk', 'dresser', 'night_stand',
           'bookshelf', 'bathtub')
WIDTH, HEIGHT, FOCAL = 730, 530, 529.5
CAMERA_HEIGHT = 1.2
# name: (dx, dy, dz)
SIZES = {'bed': (2.0, 1.6, 0.6), 'table': (1.2, 0.8, 0.75), 'chair': (0.5, 0.5, 0.9)}
# depth (x right, y forward, z up) -> camera (x right, y down, z forward)
DEPTH2CAM = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])
K = np.array([[FOCAL, 0, WIDTH / 2], [0, FOCAL, HEIGHT / 2], [0, 0, 1.0]])


def _corners(box):
    x, y, z, dx, dy, dz, yaw = box
    signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
    local = signs * [dx / 2, dy / 2, dz / 2]
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([x + c * local[:, 0] - s * local[:, 1],
                     y + s * local[:, 0] + c * local[:, 1], z + local[:, 2]], axis=1)


def _project(points):
    cam = points @ DEPTH2CAM.T
    uv = cam @ K.T
    return uv[:, :2] / uv[:, 2:3]


def make_tiny_sunrgbd(root: str, num_frames: int = 8, seed: int = 0) -> str:
    """Writes ``num_frames`` frames under ``root``; returns the path of the train infos."""
    rng = np.random.default_rng(seed)
    for folder in ('points', osp.join('sunrgbd_trainval', 'image')):
        os.makedirs(osp.join(root, folder), exist_ok=True)
    depth2img = pad4(K @ DEPTH2CAM)
    data_list = []
    for frame in range(num_frames):
        name = f'{frame + 1:06d}'
        instances, parts = [], []
        for slot, cls in enumerate(('bed', 'table', 'chair')):
            dx, dy, dz = SIZES[cls]
            box = [(slot - 1) * 1.3 + rng.uniform(-0.2, 0.2), rng.uniform(2.8, 4.5),
                   -CAMERA_HEIGHT + dz / 2, dx, dy, dz, rng.uniform(-0.4, 0.4)]
            uv = _project(_corners(box))
            x1, y1 = np.clip(uv.min(0), 0, [WIDTH - 1, HEIGHT - 1])
            x2, y2 = np.clip(uv.max(0), 0, [WIDTH - 1, HEIGHT - 1])
            label = CLASSES.index(cls)
            instances.append(dict(bbox_3d=[float(v) for v in box], bbox_label_3d=label,
                                  bbox=[float(x1), float(y1), float(x2), float(y2)],
                                  bbox_label=label))
            local = rng.uniform(-0.45, 0.45, (150, 3)) * [dx, dy, dz]
            c, s = np.cos(box[6]), np.sin(box[6])
            parts.append(np.stack([box[0] + c * local[:, 0] - s * local[:, 1],
                                   box[1] + s * local[:, 0] + c * local[:, 1],
                                   box[2] + local[:, 2]], axis=1))
        floor = np.stack([rng.uniform(-3, 3, 3000), rng.uniform(0.5, 6, 3000),
                          rng.normal(-CAMERA_HEIGHT, 0.01, 3000)], axis=1)
        wall = np.stack([rng.uniform(-3, 3, 1000), rng.normal(6, 0.01, 1000),
                         rng.uniform(-CAMERA_HEIGHT, 1.5, 1000)], axis=1)
        xyz = np.concatenate([floor, wall] + parts)
        points = np.concatenate([xyz, rng.uniform(0, 1, (len(xyz), 3))], axis=1)
        points.astype(np.float32).tofile(osp.join(root, 'points', f'{name}.bin'))
        write_image(rng, osp.join(root, 'sunrgbd_trainval', 'image', f'{name}.jpg'), WIDTH,
                    HEIGHT, block=16)
        data_list.append(dict(
            sample_idx=frame + 1,
            lidar_points=dict(num_pts_feats=6, lidar_path=f'{name}.bin'),
            images=dict(CAM0=dict(img_path=f'{name}.jpg', height=HEIGHT, width=WIDTH,
                                  depth2img=depth2img.tolist())),
            instances=instances))
    metainfo = dict(categories={name: i for i, name in enumerate(CLASSES)},
                    dataset='sunrgbd', info_version='1.1')
    info_path = osp.join(root, 'sunrgbd_infos_train.pkl')
    with open(info_path, 'wb') as f:
        pickle.dump(dict(metainfo=metainfo, data_list=data_list), f)
    return info_path
