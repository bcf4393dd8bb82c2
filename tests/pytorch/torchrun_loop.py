"""A plain training script as users launch it with torchrun: the detector of
:mod:`tests.pytorch.scale_detector` under ``--wrapper`` (GuardedDDP, or torch's DDP with its
graph search), a checkpoint of ``model.module.state_dict()`` and the optimizer's after every
step, resumed from when torchrun restarts the workers (``--crash-at``: rank 1 raises before
that step in the first attempt, ``--max-restarts`` brings every worker back), the final
state saved by each rank to ``--out``; with ``--report-dir``, UnusedParamsReport's files,
the summary left to the interpreter's exit (no ``finish()``).

The group's store is prefixed with the attempt: torch 2.13's torchrun keeps the agent's
store across restarts, and a restarted worker's gloo then reads the first attempt's
addresses (``Gloo connectFullMesh failed ... Connection refused``, or a hang): 3 and 4 of 5
restarts of plain DDP failed so, with and without ``--rdzv-backend=c10d``. Users of a
restarting gloo job need this too (docs/compatibility.md)."""
import argparse
import os
import os.path as osp

import torch
import torch.distributed as dist

from mmdet3d_ddp_guard.environment.cpu_ddp import leave_gloo_cleanly
from mmdet3d_ddp_guard.pytorch import UnusedParamsReport
from tests.dist_utils import TRUSTED_LOAD
from tests.pytorch.loops import Run, _batches_of, graph_search, guarded

STEPS = 6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--wrapper', choices=('guarded', 'graph_search'), required=True)
    parser.add_argument('--checkpoint-dir', required=True)
    parser.add_argument('--out', required=True)
    parser.add_argument('--crash-at', type=int, default=None)
    parser.add_argument('--report-dir', default=None)
    args = parser.parse_args()
    attempt = int(os.environ.get('TORCHELASTIC_RESTART_COUNT', 0))
    # env:// takes the store torchrun offers: its agent's, or, where workers restart on a
    # store of their own (tests/torchrun_restart.py), one that rank 0 hosts per attempt.
    dist.init_process_group('gloo')
    rank = dist.get_rank()
    run = Run(guarded if args.wrapper == 'guarded' else graph_search)
    if args.report_dir:
        UnusedParamsReport(run.model, out_dir=args.report_dir, interval=2)
    checkpoint = osp.join(args.checkpoint_dir, f'{args.wrapper}.pth')
    start = 0
    if osp.exists(checkpoint):
        state = torch.load(checkpoint, **TRUSTED_LOAD)
        run.model.module.load_state_dict(state['model'])
        run.optimizer.load_state_dict(state['optimizer'])
        start = state['step'] + 1
    for step, batches in enumerate(_batches_of(rank, 'plain', STEPS, 1)):
        if step < start:
            continue
        if step == args.crash_at and rank == 1 and attempt == 0:
            raise RuntimeError('rank 1 crashes once, before step %d' % step)
        run.step(rank, batches)
        if rank == 0:
            torch.save(dict(model=run.model.module.state_dict(),
                            optimizer=run.optimizer.state_dict(), step=step),
                       checkpoint + '.tmp')
            os.replace(checkpoint + '.tmp', checkpoint)
        dist.barrier()
    torch.save(dict(run.state(), restarted=attempt, start=start), f'{args.out}.{rank}')
    # Not destroy_process_group() alone: the wrapper, freed when this returns, would
    # deadlock with a gloo worker still letting go of the last barrier (see the function).
    leave_gloo_cleanly()


if __name__ == '__main__':
    main()
