"""Writes the tiny nuScenes and KITTI datasets the example configs train on.

Deterministic (same bytes every run), in mmdet3d's own on-disk formats, so that training goes
through mmdet3d's real dataset classes, transforms and data preprocessor.
"""
import argparse
import os.path as osp

DEFAULT_ROOT = 'data/tiny'


def make_tiny_data(root: str = DEFAULT_ROOT) -> dict:
    """Both datasets under ``root``; returns the info file of each."""
    from ..examples.tiny_kitti import make_tiny_kitti
    from ..examples.tiny_nuscenes import make_tiny_nuscenes
    return dict(nuscenes=make_tiny_nuscenes(osp.join(root, 'nuscenes')),
                kitti=make_tiny_kitti(osp.join(root, 'kitti')))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--root', default=DEFAULT_ROOT,
                        help=f'where to write (default: {DEFAULT_ROOT}, which the example '
                        'configs read)')


def main(args: argparse.Namespace) -> int:
    for name, info in make_tiny_data(args.root).items():
        print(f'{name}: {info}')
    return 0
