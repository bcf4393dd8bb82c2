"""The plugin package, imported by ``projects/train.py`` the way the codebases import theirs.

Importing it imports ``apis.mmdet_train``, whose module top binds
``mmcv.parallel.MMDistributedDataParallel`` by name (``from ... import ...``), as the
codebases' plugins do, and registers ``BranchRetinaNet``.
"""
from tests.openmmlab1 import branch_detector  # noqa: F401  (registers BranchRetinaNet)
from .apis.mmdet_train import custom_train_detector  # noqa: F401
