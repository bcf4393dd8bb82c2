"""Run by torchrun in test_stall_guard_costs.py: a stop verdict while rank 0 writes a
checkpoint slowly.

3 gloo ranks under GuardedDDP (stall_timeout 2 s). After two healthy steps rank 0 enters the
'checkpoint' phase (as the StallPhaseHook does around MMEngine's save) and writes a 24 MB
``torch.save`` in 1 MB pieces, 0.4 s each (about 10 s); meanwhile ranks 1 and 2 all-reduce
tensors of different sizes (a loss term counted differently per rank) and wait there for
rank 0: their collectives cannot meet, and the guard stops the run while rank 0 still
writes (rank 0 then waits too, outside collectives). Rank 0 prints ``SAVED <path>`` when its write ends; the test loads the file.
"""
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from mmengine.optim import OptimWrapper

from mmdet3d_ddp_guard import GuardedDDP

PIECE, PIECES, PIECE_SECONDS = 1 << 20, 24, 0.4


class SlowFile:
    """A file whose writes take PIECE_SECONDS per PIECE bytes, as a slow shared disk."""

    def __init__(self, path):
        self.file = open(path, 'wb')

    def write(self, data):
        view = memoryview(data)
        for start in range(0, len(view), PIECE):
            self.file.write(view[start:start + PIECE])
            time.sleep(PIECE_SECONDS)
        return len(view)

    def flush(self):
        self.file.flush()

    def close(self):
        self.file.close()


def main(path: str) -> None:
    dist.init_process_group('gloo')
    rank = dist.get_rank()
    torch.manual_seed(0)
    ddp = GuardedDDP(nn.Linear(8, 1), stall_timeout=2.0)
    optim_wrapper = OptimWrapper(torch.optim.SGD(ddp.parameters(), lr=0.01))
    for _ in range(2):
        loss = ddp(torch.randn(4, 8)).pow(2).mean()
        optim_wrapper.update_params(loss)
    if rank == 0:
        ddp.stall_position.enter('checkpoint')
        file = SlowFile(path)
        torch.save({'weights': torch.randn(PIECES * PIECE // 4)}, file)
        file.close()
        print(f'SAVED {path}', flush=True)
        ddp.stall_position.enter('hooks')
    else:
        dist.all_reduce(torch.ones(rank + 1))  # 2 elements on rank 1, 3 on rank 2
    time.sleep(60)  # not reached: the stall guard ends every rank


if __name__ == '__main__':
    main(sys.argv[1])
