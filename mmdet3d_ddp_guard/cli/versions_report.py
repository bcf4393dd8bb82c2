"""``python -m mmdet3d_ddp_guard --version``: this package's version, Python's, and every
framework found, with its version, the folder Python imports it from and the distribution
that installed that folder (or none: a source tree on ``sys.path``), so that a user sees which
MMEngine or mmcv the guard serves when several copies are around."""
import argparse
import platform

from ..environment.framework_table import framework
from ..environment.frameworks import distribution_of, found_frameworks
from ..version import __version__


def versions_report() -> str:
    lines = [f'mmdet3d_ddp_guard {__version__} (Python {platform.python_version()})']
    for found in found_frameworks().values():
        owner = distribution_of(found.path)
        source = (f"distribution {owner.metadata['Name']} {owner.version}" if owner is not None
                  else 'no distribution installed it: a source tree on sys.path')
        lines.append(f'{framework(found.name).short_title}: {found.module} {found.version} '
                     f'at {found.path} ({source})')
    return '\n'.join(lines)


class VersionsAction(argparse.Action):
    """``--version``: prints :func:`versions_report` and exits (the report reads every
    installed distribution's file list: only when asked)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(versions_report())
        parser.exit()
