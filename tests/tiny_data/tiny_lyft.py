"""A tiny, deterministic Lyft dataset in MMDetection3D 1.4's own on-disk format.

What ``tools/create_data.py lyft`` (then ``update_infos_to_v2.py``) writes and mmdet3d's
``LyftDataset`` reads with the Lyft configs' ``data_prefix`` (``pts`` and ``sweeps`` both
``v1.01-train/lidar``)::

    root/
      v1.01-train/lidar/<name>.bin   key frames and sweeps: float32 x, y, z, intensity, ring
      lyft_infos_train.pkl           dict(metainfo=..., data_list=[...])

The scenes are those of :mod:`.tiny_nuscenes` (same seed, same points: cars in every frame,
pedestrians in frames 0, 3, 4, 7, ...; two sweeps per key frame), with Lyft's label order
and metainfo; boxes are ``[x, y, z, l, w, h, yaw]`` with z at the box centre, as Lyft's
converter writes them (``LyftDataset`` reads them with origin (0.5, 0.5, 0.5)). Lyft's
infos carry no velocity.
"""
import os
import os.path as osp
import pickle
import shutil

import numpy as np

from demo import tiny_nuscenes

# LyftDataset.METAINFO['classes']
CLASSES = ('car', 'truck', 'bus', 'emergency_vehicle', 'other_vehicle', 'motorcycle',
           'bicycle', 'pedestrian', 'animal')
LIDAR_DIR = osp.join('v1.01-train', 'lidar')


def make_tiny_lyft(root: str, num_frames: int = 8, points_per_frame: int = 4000,
                   seed: int = 0) -> str:
    """Writes the frames, their sweeps and ``lyft_infos_train.pkl`` under ``root``;
    returns the info file's path."""
    rng = np.random.default_rng(seed)
    staging = osp.join(root, '.staging')
    lidar_dir = osp.join(root, LIDAR_DIR)
    os.makedirs(lidar_dir, exist_ok=True)
    data_list = []
    for frame in range(num_frames):
        info = tiny_nuscenes._frame_info(rng, staging, frame, points_per_frame,
                                         every_class=False)
        name = info['lidar_points']['lidar_path'].replace('tiny-nuscenes', 'tiny-lyft')
        shutil.move(osp.join(staging, 'samples', 'LIDAR_TOP',
                             info['lidar_points']['lidar_path']), osp.join(lidar_dir, name))
        info['lidar_points']['lidar_path'] = name
        for sweep in info['lidar_sweeps']:
            old = sweep['lidar_points']['lidar_path']
            new = osp.basename(old).replace('tiny-nuscenes', 'tiny-lyft')
            shutil.move(osp.join(staging, old), osp.join(lidar_dir, new))
            sweep['lidar_points']['lidar_path'] = osp.join(LIDAR_DIR, new)
        for instance in info['instances']:
            label = CLASSES.index(tiny_nuscenes.CLASSES[instance['bbox_label_3d']])
            instance.update(bbox_label=label, bbox_label_3d=label)
            instance.pop('velocity', None)
            instance.pop('num_radar_pts', None)
        info['token'] = f'tiny-lyft-{frame:04d}'
        data_list.append(info)
    shutil.rmtree(staging, ignore_errors=True)
    metainfo = dict(categories={name: i for i, name in enumerate(CLASSES)}, dataset='lyft',
                    version='v1.01-train', info_version='1.1')
    info_path = osp.join(root, 'lyft_infos_train.pkl')
    with open(info_path, 'wb') as f:
        pickle.dump(dict(metainfo=metainfo, data_list=data_list), f)
    return info_path
