"""The stall guard records every collective the torch at hand can issue
(stall_guard/collective_functions.py), on every leg of the version matrix: the list is
read from ``distributed_c10d``, and what it leaves out is documented; calls through the
recording layer on real gloo ranks: the coalesced forms, a subgroup this rank is not in, a
call that raises, an uneven all_gather, and the NCCL-only ``all_gather_single``."""
import os.path as osp
import threading

import pytest
import torch
import torch.distributed as dist

from mmdet3d_ddp_guard.stall_guard import recording_functions
from mmdet3d_ddp_guard.stall_guard.collective_functions import (
    GROUP_QUERIES, POINT_TO_POINT, collective_functions, functions_with_a_group)
from mmdet3d_ddp_guard.stall_guard.collective_log import CollectiveLog
from mmdet3d_ddp_guard.stall_guard.process_stall_guard import PROCESS_STALL_GUARD
from mmdet3d_ddp_guard.stall_guard.recording_functions import CollectiveRecording
from mmdet3d_ddp_guard.stall_guard.stall_diagnosis import diagnose
from mmdet3d_ddp_guard.environment.framework_table import MMENGINE_LINES
from tests.dist_utils import run_distributed

LIMITS = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'docs', 'limits.md')


def test_every_function_that_takes_a_group_is_recorded_or_left_out_by_name():
    recorded = set(collective_functions())
    for name in functions_with_a_group():
        assert name in recorded or name in GROUP_QUERIES or name in POINT_TO_POINT, name
    # The names torch's own SyncBatchNorm gathers with, on the versions that have them.
    for name in ('all_reduce', 'all_gather', '_all_gather_base', 'all_gather_into_tensor',
                 'all_gather_single', 'all_reduce_coalesced', 'all_gather_coalesced'):
        assert name in recorded or not hasattr(dist, name), name


def test_what_is_left_out_is_said_in_the_limits():
    with open(LIMITS) as limits:
        text = limits.read()
    for name in sorted(POINT_TO_POINT):
        assert f'`{name}`' in text, name


def test_only_the_counts_every_rank_must_pass_alike_are_compared():
    table = collective_functions()
    assert table['all_reduce'][1] == 'tensor' and table['broadcast'][1] == 'tensor'
    for uneven in ('all_gather', 'reduce_scatter', 'all_to_all', 'all_to_all_single',
                   'gather', 'scatter', 'all_gather_object'):
        assert table[uneven][1] is None, uneven


def _record_calls(rank, world_size):
    model = torch.nn.Linear(2, 2)
    log = CollectiveLog(model)
    PROCESS_STALL_GUARD.recording.activate(log)
    try:
        dist.all_reduce_coalesced([torch.ones(3), torch.ones(2)])
        dist.all_gather_coalesced([[torch.zeros(2)] for _ in range(world_size)], [torch.ones(2)])
        dist.all_gather([torch.zeros(3) for _ in range(world_size)], torch.ones(3))
        # Every rank creates every subgroup; each calls a collective on the other's only.
        subgroups = [dist.new_group([r]) for r in range(world_size)]
        dist.all_reduce(torch.ones(1), group=subgroups[1 - rank])
        try:
            dist.all_reduce(torch.ones(1), op='not an op')
        except (TypeError, RuntimeError, ValueError, AttributeError):
            pass
        # A thread of the user's own (a background saver) on a group of its own.
        saver_group = dist.new_group(list(range(world_size)))
        saver = threading.Thread(target=dist.barrier, kwargs=dict(group=saver_group),
                                 name='saver')
        saver.start()
        saver.join()
        snapshot = log.snapshot()
    finally:
        PROCESS_STALL_GUARD.recording.deactivate(log)
    return snapshot


@pytest.mark.timeout(120)
def test_calls_through_the_recording_layer_on_gloo_ranks():
    snapshots = run_distributed(_record_calls)
    for rank, snapshot in enumerate(snapshots):
        # No subgroup entry (not a member); the saver thread's barrier in a sequence of its
        # own.
        assert list(snapshot) == ['world', 'ranks 0,1 from thread saver'], snapshot
        assert [entry[1] for entry in snapshot['ranks 0,1 from thread saver']['entries']] == \
            ['barrier']
        entries = snapshot['world']['entries']
        assert [entry[1:3] for entry in entries] == [
            ['all_reduce_coalesced', 5], ['all_gather_coalesced', None], ['all_gather', None]]
        # Placed at this test's call, not in the deprecation decorator that wraps it.
        assert osp.basename(entries[1][5][3]) == 'test_collective_functions.py'
    # The ranks' sequences agree: so do their digests.
    assert snapshots[0]['world']['entries'][-1][6] == snapshots[1]['world']['entries'][-1][6]



def _record_as_nccl_runs(calls):
    """``calls``: (op, args) run through the recording layer with torch's function replaced
    (gloo cannot run these: NCCL-only functions, uneven gathers); the entries recorded."""
    log = CollectiveLog(torch.nn.Linear(2, 2))
    log.start_iteration(5)
    recording = CollectiveRecording()
    recording.active = log
    for op, args in calls:
        recording_functions._recording(op, lambda *args, **kwargs: None, recording)(*args)
    return log.snapshot()


def test_all_gather_single_is_recorded_as_torch_s_sync_bn_calls_it_on_nccl():
    if 'all_gather_single' not in collective_functions():
        pytest.skip(f'torch {torch.__version__} has no all_gather_single')
    snapshot = _record_as_nccl_runs([('all_gather_single',
                                                   (torch.zeros(8), torch.zeros(4)))])
    assert [entry[1:3] for entry in snapshot['world']['entries']] == [['all_gather_single', 8]]


@pytest.mark.parametrize('blocking', [True, False])
def test_an_uneven_all_gather_then_rank_0_evaluating_is_no_hang(blocking):
    """Gather the predictions (37 on rank 0, 41 on rank 1, as NCCL gathers them), evaluate on
    rank 0 past the timeout while rank 1 waits for the result: a healthy step."""
    snapshots = [_record_as_nccl_runs([
        ('all_gather', ([torch.zeros(n) for n in (37, 41)], torch.ones(37 + 4 * rank))),
    ] + ([('broadcast_object_list', ([None], ))] if rank else [])) for rank in (0, 1)]
    positions = {rank: dict(iteration=5, phase='hooks', error=None, moves=0, pid=rank,
                            groups=snapshot,
                            call=dict(op='broadcast_object_list', where='metric.py:9 in f')
                            if rank else None)
                 for rank, snapshot in enumerate(snapshots)}
    assert not diagnose(positions, 180, blocking, MMENGINE_LINES).stop


def _torch_s_functions() -> dict:
    return {op: getattr(getattr(dist, op), 'ddp_guard_original', getattr(dist, op))
            for op in collective_functions() if hasattr(dist, op)}


def test_the_last_deactivation_puts_torch_s_functions_back():
    """Recording only while a log is active; the next activation reinstalls the same
    recording functions (a compiled frame's guard on them holds)."""
    torch_s = _torch_s_functions()
    log = CollectiveLog(torch.nn.Linear(2, 2))
    PROCESS_STALL_GUARD.recording.activate(log)
    try:
        recording = {op: getattr(dist, op) for op in torch_s}
        assert all(recording[op] is not torch_s[op] for op in torch_s)
    finally:
        PROCESS_STALL_GUARD.recording.deactivate(log)
    assert {op: getattr(dist, op) for op in torch_s} == torch_s
    assert dist.all_reduce is dist.distributed_c10d.all_reduce
    PROCESS_STALL_GUARD.recording.activate(log)
    try:
        assert {op: getattr(dist, op) for op in torch_s} == recording
    finally:
        PROCESS_STALL_GUARD.recording.activate(None)  # recording nothing: torch's functions too
    assert {op: getattr(dist, op) for op in torch_s} == torch_s


def test_the_recording_functions_pickle_as_torch_s():
    """By reference to ``torch.distributed``, which a process without the guard (or this
    one once the guard stops) resolves to torch's function."""
    import pickle
    torch_s = _torch_s_functions()
    log = CollectiveLog(torch.nn.Linear(2, 2))
    PROCESS_STALL_GUARD.recording.activate(log)
    try:
        pickled = {op: pickle.dumps(getattr(dist, op)) for op in torch_s}
        assert all(pickle.loads(pickled[op]) is getattr(dist, op) for op in torch_s)
    finally:
        PROCESS_STALL_GUARD.recording.deactivate(log)
    assert not any(b'mmdet3d_ddp_guard' in data for data in pickled.values())
    assert {op: pickle.loads(data) for op, data in pickled.items()} == torch_s
