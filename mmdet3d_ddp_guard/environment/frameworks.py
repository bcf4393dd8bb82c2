"""Which OpenMMLab framework is installed, read from the installed distributions so that
finding out imports neither (``import mmcv`` 1.x is slow, and mmcv 2.x pulls MMEngine)."""
from importlib import metadata
from typing import Dict, Optional

from .framework_table import FRAMEWORKS
from .version_numbers import major_minor


def _distribution_version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed_frameworks() -> Dict[str, str]:
    """``{name: version}`` of the table's frameworks that are installed (a row's
    ``distributions``, in order: for mmcv 1.x the ``mmcv-full`` distribution, or ``mmcv``
    below 2.0, its lite build), in the table's order. Raises ImportError, naming them, when
    none is."""
    found = {}
    for row in FRAMEWORKS:
        for distribution, below in row.distributions:
            version = _distribution_version(distribution)
            if version is not None and (below is None or major_minor(version) < below):
                found[row.name] = version
                break
    if not found:
        raise ImportError(
            'mmdet3d_ddp_guard guards the DDP of an OpenMMLab training, and none of its '
            'frameworks is installed: install '
            + ', or '.join(row.to_install for row in FRAMEWORKS) + '.')
    return found
