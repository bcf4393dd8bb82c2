import os

import pytest
import torch.distributed as dist

from tests.timeouts import scaled, slowdown


def pytest_report_header(config):
    return f'timeouts x{slowdown():.1f} for this machine\'s speed (tests/timeouts.py)'


def pytest_collection_modifyitems(config, items):
    """Every pytest-timeout limit, from a test's marker or pytest.ini, scaled to this machine."""
    for item in items:
        marker = item.get_closest_marker('timeout')
        seconds = (marker.args[0] if marker and marker.args
                   else marker.kwargs['timeout'] if marker and 'timeout' in marker.kwargs
                   else float(config.getini('timeout')))
        item.add_marker(pytest.mark.timeout(scaled(seconds)), append=False)


@pytest.fixture
def single_rank_group():
    """A real one-rank gloo process group in the test process, for build-time checks."""
    from mmdet3d_ddp_guard.cli.launch import free_port
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()))
    dist.init_process_group('gloo', rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(scope='session')
def kitti_root(tmp_path_factory):
    """Tiny KITTI data in mmdet3d's format (``examples.tiny_kitti``), written once."""
    from mmdet3d_ddp_guard.examples.tiny_kitti import make_tiny_kitti
    root = str(tmp_path_factory.mktemp('tiny_kitti'))
    make_tiny_kitti(root)
    return root
