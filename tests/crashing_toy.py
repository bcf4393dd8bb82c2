"""The toy gated refiner, with a rank that raises in its forward: what a new layer's bug, a
data error or an OOM does to one rank of a job (for tests/test_stall_guard_costs.py, through
``custom_imports`` under torchrun)."""
import torch.distributed as dist
from mmengine.registry import MODELS

from tests.toys.gated_refiner_toy import ToyGatedRefinerDetector

ERROR_TEXT = 'rank 1 cannot read its batch'


@MODELS.register_module()
class CrashingToyDetector(ToyGatedRefinerDetector):
    """Raises ``ValueError`` in the forward of ``crash_call`` (0-based) on ``crash_rank``."""

    def __init__(self, crash_rank: int = 1, crash_call: int = 3, **kwargs):
        super().__init__(**kwargs)
        self.crash_rank = crash_rank
        self.crash_call = crash_call
        self.calls = 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        if self.calls - 1 == self.crash_call and dist.get_rank() == self.crash_rank:
            raise ValueError(ERROR_TEXT)
        return super().forward(*args, **kwargs)
