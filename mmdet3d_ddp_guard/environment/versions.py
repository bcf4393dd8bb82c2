"""Which torch, MMEngine and Python this package supports, checked once at import.

OpenMMLab's convention, which this package follows: the user installs the torch that matches
their CUDA, and no package lists torch as an install requirement (pip would otherwise replace
a CUDA build with whatever it resolves). So the range is checked here, at import, with a
message that names it:

- torch below :data:`MIN_TORCH` is refused: torch 1.8's DDP comm hook cannot tell the last
  gradient bucket, which carries the unused-parameter counts (see
  :mod:`.unused_counts_comm_hook`); the DDP surface that differs from 1.9 on is kept in
  :mod:`.ddp_compat`;
- a torch newer than :data:`NEWEST_TESTED_TORCH` gets one warning, not a refusal: the private
  DDP surface this package touches (the reducer's comm hook on the last bucket, the
  ``AccumulateGrad`` node) has been stable for years, and a refusal would block users for no
  known reason;
- a framework below its row's ``minimum`` (:mod:`.framework_table`: MMEngine below what
  mmdet3d 1.4 itself requires, mmcv-full below the oldest the research codebases pin) is
  refused by :func:`check_framework`, which its adapter calls, naming where Python imported
  it from.

Each check takes version strings (or the module its adapter imported), so that this module
imports no framework.
"""
import os.path as osp
import sys
import warnings
from typing import Collection, Optional, Tuple

from ..messages.framework_found import framework_too_old_at
from .framework_table import FRAMEWORKS, Framework, rows_of
from .frameworks import installed_frameworks
from .version_numbers import major_minor

#: The oldest torch this package is tested on (torch 1.9.1, Python 3.8).
MIN_TORCH = (1, 9)
#: The torches the version matrix runs (tools/version_matrix.sh), named in the refusal.
TESTED_TORCHES = ('1.9.1', '1.12.1', '1.13.1', '2.1.2', '2.13.0', '2.14.1')
#: The newest torch tested; newer ones get one warning.
NEWEST_TESTED_TORCH = (2, 14)
MIN_PYTHON = (3, 8)
#: pytorch/pytorch#124193 (torch 2.4) fixed DDP's graph search under ``no_sync``
#: (pytorch/pytorch#69031): before it, a parameter used in an earlier micro-step of an
#: accumulation window but not in the last one is not synchronised.
GRAPH_SEARCH_ACCUMULATES_RIGHT_SINCE = (2, 4)


def _dotted(version: Tuple[int, int]) -> str:
    return '.'.join(map(str, version))


def _without_the_guard(frameworks: Optional[Collection[str]]) -> str:
    """How to train without the guard, in the words of the frameworks installed (under
    MMEngine the config also names GuardedDDP, which mmcv 1.x's configs never do); of every
    framework where none is."""
    if frameworks is None:
        try:
            frameworks = installed_frameworks()
        except ImportError:
            frameworks = ()
    rows = rows_of(frameworks) or FRAMEWORKS
    if len(rows) == 1:
        return rows[0].without_the_guard
    return '; '.join(f'under {row.short_title}, {row.without_the_guard}' for row in rows)


def check_torch(torch_version: str,
                python_version: Tuple[int, int] = sys.version_info[:2],
                frameworks: Optional[Collection[str]] = None) -> None:
    """Raises RuntimeError, naming the supported range and the fix, on an unsupported
    torch or Python; warns once on a torch newer than the newest tested. ``frameworks``
    (the names of :mod:`.framework_table`) picks the words of the fix; by default the
    installed ones."""
    if tuple(python_version) < MIN_PYTHON:
        raise RuntimeError(
            f'mmdet3d_ddp_guard needs Python >= {_dotted(MIN_PYTHON)}, but this is Python '
            f'{_dotted(tuple(python_version))}.')
    torch_mm = major_minor(torch_version)
    if torch_mm < MIN_TORCH:
        raise RuntimeError(
            f'mmdet3d_ddp_guard supports torch >= {_dotted(MIN_TORCH)} (tested on '
            f'{", ".join(TESTED_TORCHES)}), but torch {torch_version} is installed: its DDP '
            'comm hook cannot tell the last gradient bucket, which the guard needs. Upgrade '
            f'torch to {_dotted(MIN_TORCH)} or newer (e.g. pip install torch==1.9.1, which '
            'mmcv-full 1.x and mmcv 2.x both have wheels for), or '
            f'{_without_the_guard(frameworks)}.')
    if torch_mm > NEWEST_TESTED_TORCH:
        # The same words for both frameworks: this runs before either adapter loads.
        warnings.warn(
            f'mmdet3d_ddp_guard was tested up to torch {_dotted(NEWEST_TESTED_TORCH)}; torch '
            f'{torch_version} is newer. It should work; if training with mmdet3d_ddp_guard '
            'fails, please report it with this version.', stacklevel=3)


def check_framework(framework: Framework, module) -> None:
    """Refuses ``framework`` (a row of the table) where ``module``, its imported package,
    says a version below the row's ``minimum``, naming where Python imported it from; its
    adapter calls it when it is imported."""
    if major_minor(module.__version__) < framework.minimum:
        raise RuntimeError(framework_too_old_at(
            framework.too_old.format(version=module.__version__), module.__name__,
            osp.dirname(module.__file__)))


def graph_search_accumulates_right(torch_version: str) -> bool:
    """Whether DDP's ``find_unused_parameters=True`` is correct with gradient accumulation
    on this torch (pytorch/pytorch#69031, fixed in torch 2.4)."""
    return major_minor(torch_version) >= GRAPH_SEARCH_ACCUMULATES_RIGHT_SINCE
