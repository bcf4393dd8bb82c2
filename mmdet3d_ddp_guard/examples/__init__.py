"""Example models: small ones with known unused-parameter patterns (tests, demo,
benchmarks) and the custom layer added to mmdet3d's CenterPoint (``examples.custom_layers``,
imported only where mmdet3d is installed)."""
from .toy_models import UNUSED_PATTERNS, ToyDataset, ToyDetector, make_toy_batch

__all__ = ['ToyDetector', 'ToyDataset', 'make_toy_batch', 'UNUSED_PATTERNS']
