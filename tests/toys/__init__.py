"""The tests' and benchmarks' models: small ones with known unused-parameter patterns
(:mod:`.toy_models`), the gated refiner toy and the BEV network. Not installed: configs name
them in ``custom_imports`` with the repository root importable."""
from tests.toys.toy_models import UNUSED_PATTERNS, ToyDataset, ToyDetector, make_toy_batch

__all__ = ['ToyDetector', 'ToyDataset', 'make_toy_batch', 'UNUSED_PATTERNS']
