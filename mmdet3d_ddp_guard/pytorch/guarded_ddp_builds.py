"""``guard_ddp_builds()``: a block inside which every torch ``DistributedDataParallel`` that a
library builds (Accelerate's ``prepare``, the Hugging Face Trainer's ``train``) is a
:class:`~.guarded_ddp.GuardedDDP`, for trainers that build DDP themselves and take no wrapper
class."""
import contextlib
import inspect
import logging
from typing import List, Optional, Tuple

import torch.nn.parallel

from ..environment.framework_table import PYTORCH_LINES
from ..messages.mode_request import AUTO, read_request
from ..stall_guard import DEFAULT_STALL_TIMEOUT, check_stall_timeout
from .guarded_ddp import GuardedDDP
from .loop_log import log_from_rank

#: The options of the blocks open now, innermost last: ``(find_unused_parameters,
#: stall_timeout)``.
_OPEN_BLOCKS: List[Tuple[object, Optional[float]]] = []


class BlockGuardedDDP(GuardedDDP):
    """What ``torch.nn.parallel.DistributedDataParallel`` names inside
    :func:`guard_ddp_builds`: a :class:`~.guarded_ddp.GuardedDDP` (so a DDP, and an instance
    of what the library's ``isinstance`` checks name there) whose ``find_unused_parameters``
    and ``stall_timeout`` are the block's, whatever the library passed; every other argument
    is passed on as the library wrote it. A wrapper built there stays one after the block."""

    def __init__(self, *args, **kwargs):
        find_unused_parameters, stall_timeout = _OPEN_BLOCKS[-1]
        arguments = inspect.signature(GuardedDDP).bind(*args, **kwargs).arguments
        passed = arguments.get('find_unused_parameters', find_unused_parameters)
        arguments.update(find_unused_parameters=find_unused_parameters,
                         stall_timeout=stall_timeout)
        super().__init__(**arguments)
        if passed != find_unused_parameters:  # said only where the caller asked otherwise
            log_from_rank(
                f'guard_ddp_builds: the code that built DistributedDataParallel in this block '
                f'passed find_unused_parameters={passed!r}; GuardedDDP uses the block\'s '
                f'{find_unused_parameters!r} instead (guard_ddp_builds(find_unused_parameters='
                f'{passed!r}) keeps what it passed).', logging.WARNING)


@contextlib.contextmanager
def guard_ddp_builds(find_unused_parameters=AUTO,
                     stall_timeout: Optional[float] = DEFAULT_STALL_TIMEOUT):
    """Inside the block, every ``torch.nn.parallel.DistributedDataParallel(...)`` builds a
    GuardedDDP with this ``find_unused_parameters`` (and ``stall_timeout``), in place of
    what the caller passed, which is logged where it differs; afterwards torch's class is
    back where it was, also when the block raised. For a trainer that builds DDP itself::

        from mmdet3d_ddp_guard.pytorch import guard_ddp_builds
        with guard_ddp_builds():
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

        with guard_ddp_builds():
            trainer.train()  # the Hugging Face Trainer builds DDP inside train()

    Everything else the trainer does with the model (device placement, mixed precision,
    compile, ``no_sync`` accumulation, unwrapping) is as without the block: the wrapper is a
    DDP. The Hugging Face Trainer passes ``find_unused_parameters=True`` by default (the
    graph search every step) and False under gradient checkpointing (a skipped branch then
    hangs); inside the block both become ``'auto'``.

    Only the name ``torch.nn.parallel.DistributedDataParallel`` is rebound, the one both
    libraries build through; code that imported the class under another name earlier
    (``from torch.nn.parallel import DistributedDataParallel`` at a module's top) builds
    torch's own.

    Args:
        find_unused_parameters (str | bool): ``'auto'`` (default), True or False, as
            GuardedDDP takes it.
        stall_timeout (float | None): As GuardedDDP takes it. Defaults to 180.
    """
    read_request(find_unused_parameters, built_by_runner=False, lines=PYTORCH_LINES)
    check_stall_timeout(stall_timeout, PYTORCH_LINES)
    previous = torch.nn.parallel.DistributedDataParallel
    _OPEN_BLOCKS.append((find_unused_parameters, stall_timeout))
    torch.nn.parallel.DistributedDataParallel = BlockGuardedDDP
    try:
        yield
    finally:
        torch.nn.parallel.DistributedDataParallel = previous
        _OPEN_BLOCKS.pop()
