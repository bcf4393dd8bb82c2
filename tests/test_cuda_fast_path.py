"""On CUDA, a rank that used every parameter settles without waiting for the GPU: no
host-device synchronisation between backward and optimizer step (run by the device check,
benchmarks/device_check.sh; skipped where there is no GPU)."""
import pytest
import torch

from tests.dist_utils import run_distributed
from tests.scenarios import settle_without_host_sync

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')


@pytest.mark.timeout(200)
def test_nothing_unused_settles_without_host_sync(monkeypatch):
    monkeypatch.setenv('DDP_GUARD_TEST_BACKEND', 'nccl')
    monkeypatch.setenv('DDP_GUARD_TEST_WORLD_SIZE', '1')
    assert run_distributed(settle_without_host_sync, 'none') == [4]


@pytest.mark.timeout(200)
def test_the_sync_check_catches_a_host_read(monkeypatch):
    """The check is live: a rank that leaves parameters unused reads their counts (a host
    sync, on the slow path only), and the sync debug mode turns that into an error."""
    monkeypatch.setenv('DDP_GUARD_TEST_BACKEND', 'nccl')
    monkeypatch.setenv('DDP_GUARD_TEST_WORLD_SIZE', '1')
    with pytest.raises(AssertionError, match='synchroniz'):
        run_distributed(settle_without_host_sync, 'dead_layer')
