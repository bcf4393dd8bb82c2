"""The tiny datasets of the zoo run (``benchmarks/zoo.py``), one folder per format under a
root: ``kitti``, ``nuscenes`` (LiDAR, sweeps and six cameras; boxes of every class),
``lyft``, ``waymo`` and ``sunrgbd``.

Each is deterministic and in mmdet3d 1.4's own on-disk format (see the module of each); a
``.complete`` file marks a folder written to the end.
"""
import os.path as osp
import shutil
from typing import Dict, Iterable

GENERATORS = ('kitti', 'nuscenes', 'lyft', 'waymo', 'sunrgbd')


def make_one(root: str, name: str) -> str:
    folder = osp.join(root, name)
    shutil.rmtree(folder, ignore_errors=True)
    if name == 'kitti':
        from demo.tiny_kitti import make_tiny_kitti
        info = make_tiny_kitti(folder)
    elif name == 'nuscenes':
        from demo.tiny_nuscenes import make_tiny_nuscenes
        from tests.tiny_data.tiny_nuscenes_cameras import add_cameras
        make_tiny_nuscenes(folder, every_class=True)
        info = add_cameras(folder)
    elif name == 'lyft':
        from tests.tiny_data.tiny_lyft import make_tiny_lyft
        info = make_tiny_lyft(folder)
    elif name == 'waymo':
        from tests.tiny_data.tiny_waymo import make_tiny_waymo
        info = make_tiny_waymo(folder)
    elif name == 'sunrgbd':
        from tests.tiny_data.tiny_sunrgbd import make_tiny_sunrgbd
        info = make_tiny_sunrgbd(folder)
    else:
        raise ValueError(f'no tiny {name!r} dataset; there are {", ".join(GENERATORS)}')
    with open(osp.join(folder, '.complete'), 'w') as f:
        f.write(info + '\n')
    return info


def make_zoo_data(root: str, names: Iterable[str] = GENERATORS) -> Dict[str, str]:
    """Writes the named tiny datasets under ``root``; returns the info file of each."""
    return {name: make_one(root, name) for name in names}
