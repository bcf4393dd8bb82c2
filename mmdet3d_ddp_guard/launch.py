"""Starting MMDetection3D's own ``tools/train.py`` under torchrun, as a user would."""
import os
import os.path as osp
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence


def mmdet3d_train_script() -> str:
    """``tools/train.py`` as shipped inside the installed mmdet3d (``.mim/tools``)."""
    try:
        import mmdet3d
    except ImportError as error:
        raise RuntimeError('mmdet3d is not installed; install the 3D stack with '
                           '`make venv` (see README, Set-up).') from error
    path = osp.join(osp.dirname(mmdet3d.__file__), '.mim', 'tools', 'train.py')
    if not osp.isfile(path):
        raise RuntimeError(f'mmdet3d {mmdet3d.__version__} ships no {path}.')
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@dataclass
class TrainRun:
    command: List[str]
    returncode: int
    output: str
    seconds: float
    timed_out: bool


def torchrun_train(config: str, work_dir: str, nproc: int = 2,
                   cfg_options: Sequence[str] = (), timeout: Optional[float] = None,
                   env: Optional[dict] = None) -> TrainRun:
    """``torchrun --nproc_per_node N mmdet3d/tools/train.py CONFIG --launcher pytorch``.

    Output of all ranks is captured; a run that exceeds ``timeout`` is killed and reported
    as timed out (the hang of DDP with rank-dependent unused parameters).
    """
    command = [sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={nproc}',
               f'--master_port={free_port()}', mmdet3d_train_script(), config,
               '--launcher', 'pytorch', '--work-dir', work_dir]
    if cfg_options:
        command += ['--cfg-options', *cfg_options]
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, **(env or {})},
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        output, _ = process.communicate()
        timed_out = True
    return TrainRun(command, process.returncode, output, time.monotonic() - start, timed_out)
