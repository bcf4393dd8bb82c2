"""torch's ``Join`` (uneven inputs) under GuardedDDP with the stall guard on: the joined
rank's shadow collectives carry another iteration than the other rank's, and the ranks still
train as plain DDP under Join does, with records the judgement pairs."""
import importlib.util

import pytest
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard import GuardedDDP
from mmdet3d_ddp_guard.stall_guard import diagnose
from mmdet3d_ddp_guard.environment.framework_table import MMENGINE_LINES
from tests.dist_utils import run_distributed

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec('torch.distributed.algorithms.join') is None,
    reason='torch.distributed.algorithms.join is torch >= 1.10')


def _train_with_uneven_inputs(rank: int, world_size: int, guarded: bool):
    from torch.distributed.algorithms.join import Join
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    ddp = GuardedDDP(model, stall_timeout=30) if guarded else DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)
    with Join([ddp]):
        for iteration in range(3 if rank == 0 else 6):  # rank 0 joins early
            if guarded:
                ddp.stall_position.start_forward(iteration)  # what train_step does first
            ddp(torch.randn(2, 4)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    weights = [parameter.detach().clone() for parameter in ddp.parameters()]
    snapshot = None
    if guarded:
        snapshot = ddp.stall_position.snapshot()
        ddp.stall_watchdog.stop()
    return weights, snapshot


@pytest.mark.timeout(120)
def test_join_trains_as_plain_ddp_and_its_shadow_collectives_pair():
    guarded = run_distributed(_train_with_uneven_inputs, True)
    plain = run_distributed(_train_with_uneven_inputs, False)
    for (guarded_weights, _), (plain_weights, _) in zip(guarded, plain):
        assert all(torch.equal(g, p) for g, p in zip(guarded_weights, plain_weights))
    positions = {rank: snapshot for rank, (_, snapshot) in enumerate(guarded)}
    iterations = {rank: {entry[3] for entry in p['groups']['world']['entries']}
                  for rank, p in positions.items()}
    assert max(iterations[0]) < max(iterations[1])  # the shadows carry rank 0's iteration
    assert positions[0]['groups']['world']['issued'] == \
        positions[1]['groups']['world']['issued']
    diagnosis = diagnose(positions, 5.0, blocking=True, lines=MMENGINE_LINES)
    assert not diagnosis.stop, diagnosis.text
