"""Training under the guard changes only what docs/operations.md lists (its section "What
training under it changes", which the README points to): on 2 gloo ranks, after the package and the frameworks are imported, a
snapshot (tests/import_changes_probe.py: every loaded module's names, every class's
``__dict__``, the registries, torch's allowlist, the environment, ``atexit``, torch's
operators, the threads) is compared with the process while a guarded wrapper trains, with
some parameters unused and the stall guard on; every difference must be named by a bullet
of that section. A bullet that names a module or a class covers what changes in it
(``torch.distributed``: its collective functions while the stall guard records them).

What a snapshot of the process cannot see is listed in the section and held elsewhere: the
store's keys (tests/test_unused_params_hook.py: none while nothing stalls), the exit on a
verdict and torchrun's error file (tests/test_stall_guard.py), ``optim_wrapper.backward``
(an instance attribute during the step; below, gone after it).
"""
import os.path as osp
import types

import pytest

from mmdet3d_ddp_guard.environment.frameworks import installed_frameworks
from tests.dist_utils import run_distributed
from tests.test_import_changes import ROOT, listed_in_readme

OPERATIONS = osp.join(ROOT, 'docs', 'operations.md')
SECTION = 'What training under it changes'
#: What torch counts up as it runs, whoever registers: every hook handle takes the next id.
COUNTERS = frozenset({'torch.utils.hooks.RemovableHandle.next_id'})
ADAPTER = 'mmengine' if 'mmengine' in installed_frameworks() else 'mmcv'


def _train_and_compare(rank: int, world_size: int, listed: list):
    from tests.ddp_contract import CASES, ContractNet, contract_batch, load_adapter
    from tests.import_changes_probe import Snapshot, compare, covering_names, resolve
    adapter = load_adapter(ADAPTER)
    case = CASES['rank_dependent_branch']

    def train(guarded: bool):
        ddp = adapter.wrap(adapter.model(ContractNet()), guarded, 'auto' if guarded else True)
        optimizer = adapter.optimizer(ddp, 1, 0.9)
        for iteration in range(3):
            adapter.step(ddp, optimizer, contract_batch(iteration, rank, case), iteration, 1)
        return ddp, optimizer

    # The same training under the framework's own wrapper first: what torch does once per
    # process as it trains (SGD.step wrapped for the profiler, lazy flags) is not the guard's.
    train(guarded=False)
    before = Snapshot()
    ddp, optimizer = train(guarded=True)
    changes = [change for change in compare(before) if change.name not in COUNTERS]
    names = covering_names(changes, listed)
    containers = {}  # the modules and classes listed: each covers its own attributes
    for dotted in listed:
        owner, attr = resolve(dotted)
        named = owner if attr is None else getattr(owner, attr, None)
        if isinstance(named, (types.ModuleType, type)):
            containers[id(named)] = dotted
    found = [dict(name=change.name, kind=change.kind, detail=change.detail,
                  covered_by=name or containers.get(id(change.owner)))
             for change, name in zip(changes, names)]
    backward_left = 'backward' in vars(optimizer)
    ddp.stall_watchdog.stop()
    return dict(found=found, backward_left_on_the_optim_wrapper=backward_left)


@pytest.mark.timeout(300)
def test_training_changes_only_what_the_readme_lists():
    listed = listed_in_readme(OPERATIONS, SECTION)
    results = run_distributed(_train_and_compare, listed, timeout=200)
    for rank, result in enumerate(results):
        unlisted = [f"{change['name']} ({change['kind']}: {change['detail']})"
                    for change in result['found'] if not change['covered_by']]
        assert unlisted == [], (
            f'rank {rank}: training under the guard ({ADAPTER}) changes what README.md\'s '
            f'"{SECTION}" does not list: {unlisted}')
        assert not result['backward_left_on_the_optim_wrapper']
    # The stall guard's thread and recording functions are seen: the probe is live.
    kinds = {change['name'] for change in results[0]['found']}
    assert 'threading' in kinds and any(name.startswith('torch.distributed.')
                                        for name in kinds), kinds
