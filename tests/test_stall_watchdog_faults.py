"""The stall guard's watchdog survives faults of the store it judges through: on 2 real gloo
ranks, with the run's own store wrapped so that its operations fail on demand."""
import json
import time

import pytest
import torch.distributed as dist
import torch.nn as nn

from mmdet3d_ddp_guard.core.stall_guard.rank_position import RankPosition
from mmdet3d_ddp_guard.core.stall_guard.stall_watchdog import REPORT_WAIT, StallWatchdog
from mmdet3d_ddp_guard.core.stall_guard.store_protocol import KEY_PREFIX, StallStore
from tests.dist_utils import run_distributed

TIMEOUT = 0.5


class FlakyStore:
    """The real store; every operation raises while ``failing`` is set."""

    def __init__(self, store):
        self.store, self.failing, self.failures = store, False, 0

    def __getattr__(self, name):
        operation = getattr(self.store, name)

        def call(*args, **kwargs):
            if self.failing:
                self.failures += 1
                raise RuntimeError('store unreachable (simulated)')
            return operation(*args, **kwargs)
        return call


def _through_store_faults(rank, world_size):
    position = RankPosition(nn.Linear(2, 2))
    logs = []
    store = FlakyStore(dist.PrefixStore(KEY_PREFIX + 'faults/',
                                        dist.distributed_c10d._get_default_store()))
    watchdog = StallWatchdog(position, TIMEOUT, lambda message, error: logs.append(message),
                             StallStore(store, rank, list(range(world_size))), blocking=True)
    key = f'position/{rank}'
    position.start_forward(0)
    watchdog.look()  # it sees the move
    time.sleep(TIMEOUT + 0.1)
    watchdog.look()  # stalled: publishes and judges (both ranks busy outside collectives)
    assert watchdog._published_progress is not None
    published = json.loads(store.get(key))
    store.failing = True
    position.enter('backward')  # it moves while the store is down
    for _ in range(3):
        watchdog.look()
    still_published = watchdog._published_progress is not None
    store.failing = False
    watchdog.look()  # the store is back: the stale snapshot goes
    after = json.loads(store.get(key))

    # The thread outlives a look that raises.
    looks = []

    def look():
        looks.append(1)
        if len(looks) == 1:
            raise RuntimeError('a fault inside the watchdog (simulated)')
    watchdog.look = look
    watchdog.start()
    time.sleep(12 * watchdog.tick)
    watchdog.stop()
    dist.barrier()  # rank 0's process hosts the store: it ends last
    return dict(published=published, failures=store.failures, still=still_published,
                after=after, logs=logs, looks=len(looks))


@pytest.mark.timeout(120)
def test_a_failing_store_neither_ends_the_watchdog_nor_leaves_a_stale_snapshot():
    for result in run_distributed(_through_store_faults):
        assert result['published']['phase'] == 'forward'
        assert result['failures'] >= 3 and result['still']  # tried again, every tick
        assert result['after'] == dict(moving=True)
        faults = [log for log in result['logs'] if 'cannot compare positions' in log]
        assert len(faults) == 1, result['logs']  # logged once per stall
        assert 'RuntimeError: store unreachable (simulated)' in faults[0]
        assert result['looks'] >= 3
        assert any('it goes on watching' in log for log in result['logs'])


class HungStore:
    """The real store; every operation blocks for a minute while ``hung`` is set."""

    def __init__(self, store):
        self.store, self.hung = store, False

    def __getattr__(self, name):
        operation = getattr(self.store, name)

        def call(*args, **kwargs):
            if self.hung:
                time.sleep(60)
            return operation(*args, **kwargs)
        return call


def test_a_rank_that_raises_publishes_its_error_and_a_hung_store_cannot_hold_it(
        single_rank_group):
    """report_exception, from the training thread before the error goes on up: the error's
    snapshot is in the store for the other ranks' judge; on a store that hangs it returns
    after REPORT_WAIT, so that the error and its traceback are never held back."""
    store = HungStore(dist.PrefixStore(KEY_PREFIX + 'report/',
                                       dist.distributed_c10d._get_default_store()))
    position = RankPosition(nn.Linear(2, 2))
    watchdog = StallWatchdog(position, 30.0, lambda message, error: None,
                             StallStore(store, 0, [0]), blocking=True)
    watchdog.report_exception(ValueError('this rank cannot read its batch'))
    published = watchdog.store.position(0)  # what the judge reads (None where unpublished)
    assert published is not None and \
        published['error'] == 'ValueError: this rank cannot read its batch'
    store.hung = True
    started = time.monotonic()
    watchdog.report_exception(ValueError('again'))
    assert time.monotonic() - started < REPORT_WAIT + 1.0
