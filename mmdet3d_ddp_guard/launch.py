"""Starting MMDetection3D's own ``tools/train.py`` under torchrun, as a user would."""
import os
import os.path as osp
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence


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
                   env: Optional[dict] = None,
                   torchrun_args: Optional[Sequence[str]] = None,
                   train_args: Sequence[str] = ()) -> TrainRun:
    """``torchrun --nproc_per_node N mmdet3d/tools/train.py CONFIG --launcher pytorch``.

    Output of all ranks is captured; a run that exceeds ``timeout`` is killed and reported
    as timed out (the hang of DDP with rank-dependent unused parameters).

    Args:
        torchrun_args (list[str], optional): torchrun's options besides
            ``--nproc_per_node`` (e.g. ``--nnodes``, ``--rdzv-endpoint``,
            ``--max-restarts``). Defaults to a free ``--master_port`` on this machine.
        train_args (list[str]): More options of ``tools/train.py`` (e.g. ``--resume``).
    """
    if torchrun_args is None:
        torchrun_args = [f'--master_port={free_port()}']
    command = [sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={nproc}',
               *torchrun_args, mmdet3d_train_script(), config,
               '--launcher', 'pytorch', '--work-dir', work_dir, *train_args]
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
        # torchrun starts every worker in a session of its own: killing torchrun's process
        # group would leave the workers alive, holding the output pipe open.
        for pid in process_tree(process.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        output, _ = process.communicate()
        timed_out = True
    return TrainRun(command, process.returncode, output, time.monotonic() - start, timed_out)


def process_tree(root: int) -> List[int]:
    """``root`` and all its descendants, read from Linux's ``/proc`` (only ``root`` where
    there is no ``/proc``)."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir('/proc') if osp.isdir('/proc') else []:
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat') as f:
                stat = f.read()
        except OSError:  # it ended meanwhile
            continue
        # "pid (command) state ppid ...": the command may hold spaces and parentheses.
        parent = int(stat.rsplit(')', 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending += children.get(pid, [])
    return tree
