"""Reading a package's version string as the (major, minor) pair every version check compares."""
import re
from typing import Tuple


def major_minor(version: str) -> Tuple[int, int]:
    """``'2.1.2+cu121'`` -> ``(2, 1)``; ``'2.6.0a0+git...'`` -> ``(2, 6)``."""
    match = re.match(r'(\d+)\.(\d+)', version)
    if match is None:
        raise ValueError(f'mmdet3d_ddp_guard: cannot read the version {version!r}.')
    return int(match.group(1)), int(match.group(2))
