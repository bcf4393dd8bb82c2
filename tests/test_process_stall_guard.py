"""The stall guard's process-wide state is one object, :data:`PROCESS_STALL_GUARD`, which a
wrapper's watchdog installs and uninstalls: the newest wrapper's watchdog runs, the one it
replaced stops, and once the last one stops ``torch.distributed`` holds torch's own
functions and nothing of the guard runs. No other module of the package keeps state at
module level that a run changes."""
import dataclasses
import enum
import importlib
import inspect
import pkgutil
import threading

import pytest
import torch
import torch.distributed as dist

import mmdet3d_ddp_guard
from mmdet3d_ddp_guard.environment.framework_table import FRAMEWORKS, framework
from mmdet3d_ddp_guard.environment.frameworks import installed_frameworks
from mmdet3d_ddp_guard.stall_guard.collective_functions import collective_functions
from mmdet3d_ddp_guard.stall_guard.process_stall_guard import (PROCESS_STALL_GUARD,
                                                               ProcessStallGuard)
from tests.dist_utils import run_distributed

#: Module-level values a run never changes, whatever their type.
_CONSTANT_TYPES = (type(None), bool, int, float, str, bytes, tuple, frozenset, torch.dtype)


def _package_modules():
    """Every module of the package that imports here: an adapter's folder only where its
    framework is installed (the others' modules cannot be imported, and are said)."""
    adapters = {row.adapter for row in FRAMEWORKS}
    installed = {framework(name).adapter for name in installed_frameworks()}
    for info in pkgutil.walk_packages(mmdet3d_ddp_guard.__path__, 'mmdet3d_ddp_guard.'):
        folder = info.name.split('.')[1]
        if folder in adapters and folder not in installed:
            continue
        yield importlib.import_module(info.name)


def test_the_process_wide_state_is_one_object():
    """A module-level value that a run changes is an instance of the package's own class, a
    counter, a weak reference or a lowercase container: only PROCESS_STALL_GUARD may be
    one (at 38a5614 this finds five in the stall guard's modules)."""
    found = []
    for module in _package_modules():
        for name, value in vars(module).items():
            if name.startswith('__') or inspect.ismodule(value) or callable(value) and \
                    not isinstance(value, type(PROCESS_STALL_GUARD)):
                continue
            frozen = dataclasses.is_dataclass(value) and \
                type(value).__dataclass_params__.frozen
            own_class = type(value).__module__.startswith('mmdet3d_ddp_guard.') and \
                not isinstance(value, (_CONSTANT_TYPES, enum.Enum)) and not frozen
            mutable = isinstance(value, (list, set, dict)) and not name.isupper()
            counter = type(value).__name__ in ('count', 'ReferenceType')
            if (own_class or mutable or counter) and value is not PROCESS_STALL_GUARD:
                found.append(f'{module.__name__}.{name}: {type(value).__name__}')
    assert found == []


def _torch_s_functions() -> dict:
    return {op: getattr(getattr(dist, op), 'ddp_guard_original', getattr(dist, op))
            for op in collective_functions() if hasattr(dist, op)}


def _install_two_then_uninstall(rank: int, world_size: int) -> dict:
    from mmdet3d_ddp_guard.pytorch import GuardedDDP
    torch_s = _torch_s_functions()
    first = GuardedDDP(torch.nn.Linear(2, 2))
    result = dict(first_records=dist.all_reduce is not torch_s['all_reduce'],
                  first_running=PROCESS_STALL_GUARD.running() is first.stall_watchdog)
    second = GuardedDDP(torch.nn.Linear(2, 2))
    result.update(first_stopped=first.stall_watchdog.stopped,
                  second_running=PROCESS_STALL_GUARD.running() is second.stall_watchdog,
                  records_into_second=PROCESS_STALL_GUARD.recording.active
                  is second.stall_position.collectives)
    second.stall_watchdog.stop()
    result.update(running_after=PROCESS_STALL_GUARD.running(),
                  torch_s_back={op: getattr(dist, op) for op in torch_s} == torch_s,
                  recording_after=PROCESS_STALL_GUARD.recording.active)
    return result


@pytest.mark.timeout(120)
def test_install_and_uninstall_on_gloo_ranks():
    for result in run_distributed(_install_two_then_uninstall):
        assert result == dict(first_records=True, first_running=True, first_stopped=True,
                              second_running=True, records_into_second=True,
                              running_after=None, torch_s_back=True, recording_after=None)


def test_a_fresh_process_guard_holds_nothing():
    process = ProcessStallGuard()
    assert process.running() is None and process.recording.active is None
    assert [process.next_store_prefix() for _ in range(3)] == [0, 1, 2]
    assert threading.active_count() >= 1  # building it starts no thread of its own
