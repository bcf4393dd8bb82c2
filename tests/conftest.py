import os

import pytest
import torch.distributed as dist

from tests.ci_budget import seconds_before_deadline, tests_that_give_way
from tests.timeouts import scaled, slowdown


def pytest_report_header(config):
    return f'timeouts x{slowdown():.1f} for this machine\'s speed (tests/timeouts.py)'


def pytest_collection_modifyitems(config, items):
    """Every pytest-timeout limit, from a test's marker or pytest.ini, scaled to this machine;
    under CI's deadline, the slowest tests give way when the suite cannot fit
    (tests/ci_budget.py)."""
    for item in items:
        marker = item.get_closest_marker('timeout')
        seconds = (marker.args[0] if marker and marker.args
                   else marker.kwargs['timeout'] if marker and 'timeout' in marker.kwargs
                   else float(config.getini('timeout')))
        item.add_marker(pytest.mark.timeout(scaled(seconds)), append=False)
    give_way = set(tests_that_give_way(seconds_before_deadline(), slowdown(),
                                       [item.nodeid for item in items]))
    if give_way:
        config.hook.pytest_deselected(items=[item for item in items
                                             if item.nodeid in give_way])
        items[:] = [item for item in items if item.nodeid not in give_way]
        config.ddp_guard_gave_way = sorted(give_way)
        _say_what_gave_way(config)


def _say_what_gave_way(config):
    reporter = config.pluginmanager.get_plugin('terminalreporter')
    reporter.write_line(
        f'*** GAVE WAY to CI\'s deadline (tests/ci_budget.py: the openmmlab1 leg ran first, '
        f'and the suite would not end in time at {slowdown():.1f}x a quiet machine): '
        f'{len(config.ddp_guard_gave_way)} tests not run here. Run them with: '
        f'.venv/bin/python -m pytest {" ".join(config.ddp_guard_gave_way)} ***')


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if getattr(config, 'ddp_guard_gave_way', None):
        _say_what_gave_way(config)


@pytest.fixture
def single_rank_group():
    """A real one-rank gloo process group in the test process, for build-time checks."""
    from demo.launch import free_port
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()))
    dist.init_process_group('gloo', rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(scope='session')
def kitti_root(tmp_path_factory):
    """Tiny KITTI data in mmdet3d's format (``examples.tiny_kitti``), written once."""
    from demo.tiny_kitti import make_tiny_kitti
    root = str(tmp_path_factory.mktemp('tiny_kitti'))
    make_tiny_kitti(root)
    return root
