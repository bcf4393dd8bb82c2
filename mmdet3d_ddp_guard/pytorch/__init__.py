"""The adapter for a plain PyTorch loop (torch alone, no config): :class:`GuardedDDP`, in
place of torch's ``DistributedDataParallel``, and :class:`UnusedParamsReport`, the files
that say which parameters each rank left unused, and when.

Importing it changes nothing outside this package: no registry, no patched function (a loop
builds the wrapper itself). It imports no OpenMMLab framework.
"""
from .guarded_ddp import GuardedDDP
from .unused_params_report import UnusedParamsReport

__all__ = ['GuardedDDP', 'UnusedParamsReport']
