"""Which OpenMMLab framework is installed, read from the installed distributions so that
finding out imports neither (``import mmcv`` 1.x is slow, and mmcv 2.x pulls MMEngine)."""
from importlib import metadata
from typing import Dict, Optional

from ..messages.framework_names import MMCV1, MMENGINE
from .version_numbers import major_minor


def _distribution_version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed_frameworks() -> Dict[str, str]:
    """``{'mmengine': version}`` for MMEngine and ``{'mmcv-full': version}`` for mmcv 1.x
    (the ``mmcv-full`` distribution, or ``mmcv`` below 2.0, its lite build), as many as are
    installed. Raises ImportError, naming both, when neither is."""
    found = {}
    mmengine = _distribution_version('mmengine')
    if mmengine is not None:
        found[MMENGINE] = mmengine
    mmcv1 = _distribution_version('mmcv-full')
    if mmcv1 is None:
        mmcv = _distribution_version('mmcv')
        mmcv1 = mmcv if mmcv is not None and major_minor(mmcv) < (2, 0) else None
    if mmcv1 is not None:
        found[MMCV1] = mmcv1
    if not found:
        raise ImportError(
            'mmdet3d_ddp_guard guards the DDP of an OpenMMLab training, and neither of its '
            'frameworks is installed: install MMEngine (mmdet3d >= 1.1: pip install '
            "'mmengine>=0.8'), or mmcv-full 1.x for mmdet 2.x / mmdet3d 0.x (see "
            "mmcv's install guide: it is compiled for your torch and CUDA).")
    return found
