"""Where a plain loop's guard messages go: the ``logging`` logger ``'mmdet3d_ddp_guard'``
where the program has configured logging, else stderr, as MMEngine's ``print_log`` shows
them (rank 0 in full, the other ranks their errors only, so that N ranks do not print N
copies of the same decision)."""
import logging
import sys

import torch.distributed as dist

#: The logger a program configures to take the guard's messages.
LOGGER_NAME = 'mmdet3d_ddp_guard'


def log_from_rank(message: str, level: int = logging.INFO) -> None:
    """Logs ``message`` at ``level`` (a ``logging`` level); a plain function, so that the
    counts' comm hook and the watchdog's thread hold no reference to a wrapper."""
    logger = logging.getLogger(LOGGER_NAME)
    if logger.hasHandlers():
        logger.log(level, message)
        return
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if rank == 0 or level >= logging.ERROR:
        print(f'[mmdet3d_ddp_guard rank {rank}] {logging.getLevelName(level)}: {message}',
              file=sys.stderr, flush=True)
