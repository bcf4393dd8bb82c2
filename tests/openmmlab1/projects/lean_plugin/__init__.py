"""A plugin package without a ``build_dataloader`` of its own (as PETR's), so that its
training builds the loader with mmdet's: ``configs/plugin_tiny_retinanet_branch_lean.py``."""
from tests.openmmlab1 import branch_detector  # noqa: F401  (registers BranchRetinaNet)
