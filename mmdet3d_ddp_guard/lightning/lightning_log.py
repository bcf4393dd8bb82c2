"""Where the guard's messages go under Lightning: a child of the Lightning package's own
``logging`` logger, which Lightning prints beside its own lines (rank 0; errors from every
rank, as Lightning's ``rank_zero_info`` and its errors show them)."""
import logging

import torch.distributed as dist

from .lightning_package import lightning_package

#: The logger the guard's lines go to, under Lightning's (``lightning.pytorch`` or
#: ``pytorch_lightning``), so that Lightning's handlers and levels apply.
LOGGER_NAME = f'{lightning_package().__name__}.mmdet3d_ddp_guard'


def log_to_lightning(message: str, level: int = logging.INFO) -> None:
    """Logs ``message`` at ``level`` on Lightning's logger; a plain function, so that the
    counts' comm hook and the watchdog's thread hold no reference to a wrapper."""
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if rank == 0 or level >= logging.ERROR:
        logging.getLogger(LOGGER_NAME).log(level, f'[rank {rank}] {message}')
