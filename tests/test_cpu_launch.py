"""The CPU launch fix wraps a private MMEngine function: its guards."""
import mmengine.dist.utils as mmengine_dist

from mmdet3d_ddp_guard.cpu_launch import allow_cpu_init_dist


def test_wraps_once_and_is_marked():
    # Importing the package already wrapped it; a second call must not wrap twice.
    assert getattr(mmengine_dist._init_dist_pytorch, 'ddp_guard_cpu_aware', False)
    assert allow_cpu_init_dist() is False


def test_leaves_an_mmengine_without_the_function_alone(monkeypatch):
    monkeypatch.delattr(mmengine_dist, '_init_dist_pytorch')
    assert allow_cpu_init_dist() is False
    assert not hasattr(mmengine_dist, '_init_dist_pytorch')
