import os

import pytest
import torch.distributed as dist


@pytest.fixture
def single_rank_group():
    """A real one-rank gloo process group in the test process, for build-time checks."""
    from mmdet3d_ddp_guard.launch import free_port
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
