"""``python -m demo.make_tiny_data [--zoo]`` (from the repository root) writes the tiny
nuScenes and KITTI datasets the example configs train on.

Deterministic (same bytes every run), in mmdet3d's own on-disk formats, so that training goes
through mmdet3d's real dataset classes, transforms and data preprocessor.
"""
import argparse
import os.path as osp
import sys

DEFAULT_ROOT = 'data/tiny'


def make_tiny_data(root: str = DEFAULT_ROOT) -> dict:
    """Both datasets under ``root``; returns the info file of each."""
    from demo.tiny_kitti import make_tiny_kitti
    from demo.tiny_nuscenes import make_tiny_nuscenes
    return dict(nuscenes=make_tiny_nuscenes(osp.join(root, 'nuscenes')),
                kitti=make_tiny_kitti(osp.join(root, 'kitti')))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--root', default=DEFAULT_ROOT,
                        help=f'where to write (default: {DEFAULT_ROOT}, which the example '
                        'configs read)')
    parser.add_argument('--zoo', action='store_true',
                        help="also the zoo run's datasets under ROOT/zoo: KITTI, nuScenes "
                        'with cameras, Lyft, Waymo, SUN RGB-D (benchmarks/zoo.py)')


def main(args: argparse.Namespace) -> int:
    infos = make_tiny_data(args.root)
    if args.zoo:
        from tests.tiny_data.tiny_zoo import make_zoo_data
        infos.update({f'zoo/{name}': info for name, info in
                      make_zoo_data(osp.join(args.root, 'zoo')).items()})
    for name, info in infos.items():
        print(f'{name}: {info}')
    return 0


if __name__ == '__main__':
    parser = argparse.ArgumentParser(prog='python -m demo.make_tiny_data', description=__doc__)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
