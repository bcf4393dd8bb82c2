"""Where a plain loop's guard messages go: the handlers of the ``logging`` logger
``'mmdet3d_ddp_guard'`` where the program gave it some, else stderr, as MMEngine's
``print_log`` shows them (rank 0 in full, the other ranks their errors only, so that N ranks
do not print N copies of the same decision). Only the logger's own handlers count: a root
logger configured by a library (or at WARNING) must not swallow the guard's reports."""
import logging
import sys

import torch.distributed as dist

#: The logger a program configures to take the guard's messages.
LOGGER_NAME = 'mmdet3d_ddp_guard'


def log_from_rank(message: str, level: int = logging.INFO) -> None:
    """Logs ``message`` at ``level`` (a ``logging`` level); a plain function, so that the
    counts' comm hook and the watchdog's thread hold no reference to a wrapper."""
    logger = logging.getLogger(LOGGER_NAME)
    if logger.handlers:
        logger.log(level, message)
        return
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if rank == 0 or level >= logging.ERROR:
        print(f'[mmdet3d_ddp_guard rank {rank}] {logging.getLevelName(level)}: {message}',
              file=sys.stderr, flush=True)
