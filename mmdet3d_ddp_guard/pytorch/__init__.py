"""The adapter for a plain PyTorch loop (torch alone, no config): :class:`GuardedDDP`, in
place of torch's ``DistributedDataParallel``, and :class:`UnusedParamsReport`, the files
that say which parameters each rank left unused, and when.

And :func:`guard_ddp_builds`, a block inside which the trainers that build torch's DDP
themselves (Accelerate, the Hugging Face Trainer) build a GuardedDDP.

Importing it changes nothing outside this package: no registry, no patched function (a loop
builds the wrapper itself; ``guard_ddp_builds`` rebinds torch's DDP name inside its block
only). It imports no OpenMMLab framework and no trainer.
"""
from .guarded_ddp import GuardedDDP
from .guarded_ddp_builds import guard_ddp_builds
from .unused_params_report import UnusedParamsReport

__all__ = ['GuardedDDP', 'UnusedParamsReport', 'guard_ddp_builds']
