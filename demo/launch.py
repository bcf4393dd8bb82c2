"""Starting a training script under torchrun, as a user would: MMDetection3D's own
``tools/train.py`` by default, or any script that takes ``CONFIG --launcher pytorch
--work-dir DIR [--cfg-options ...]`` (mmdet 2.x's ``tools/train.py``, a codebase's)."""
import glob
import os
import os.path as osp
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

#: The repository's root: the configs' ``custom_imports`` name modules of ``demo/`` and
#: ``tests/``, which are not installed, so every run gets the root on its ``PYTHONPATH``.
REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


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


def repository_importable(env: Optional[dict] = None) -> dict:
    """This process's environment with ``env`` on top and :data:`REPO` first on
    ``PYTHONPATH``: what a torchrun of a script that imports ``demo`` or ``tests`` needs."""
    env = {**os.environ, **(env or {})}
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [REPO, env.get('PYTHONPATH')]))
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def process_tree(pid: int) -> List[int]:
    """``pid`` and every process it started, and those started, found in ``/proc``."""
    pids, queue = [], [pid]
    while queue:
        current = queue.pop()
        pids.append(current)
        for children in glob.glob(f'/proc/{current}/task/*/children'):
            try:
                with open(children) as f:
                    queue += [int(child) for child in f.read().split()]
            except OSError:
                pass  # it exited meanwhile
    return pids


def kill_process_tree(pid: int) -> None:
    """SIGKILL to the process group of ``pid`` and of every descendant, as a node that dies
    takes them all. torchrun starts each worker in a session of its own, which a kill of
    torchrun's own group would leave running (and holding the output pipe)."""
    groups = set()
    # Collected first: a killed parent's children are re-parented at once.
    for current in process_tree(pid):
        try:
            groups.add(os.getpgid(current))
        except ProcessLookupError:
            pass
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class TrainRun:
    command: List[str]
    returncode: int
    output: str
    seconds: float
    timed_out: bool
    stopped: bool = False


def torchrun_train(config: str, work_dir: str, nproc: int = 2,
                   cfg_options: Sequence[str] = (), timeout: Optional[float] = None,
                   env: Optional[dict] = None,
                   stop_when: Optional[Callable[[], bool]] = None,
                   torchrun_args: Optional[Sequence[str]] = None,
                   train_args: Sequence[str] = (),
                   script: Optional[str] = None) -> TrainRun:
    """``torchrun --nproc_per_node N mmdet3d/tools/train.py CONFIG --launcher pytorch``.

    Output of all ranks is captured; a run that exceeds ``timeout`` is killed and reported
    as timed out (the hang of DDP with rank-dependent unused parameters). With ``stop_when``
    (polled twice a second) the run is killed as a preempted job is, SIGKILL to torchrun and
    every worker (:func:`kill_process_tree`), as soon as ``stop_when()`` returns True, and
    reported as stopped.

    Args:
        torchrun_args (list[str], optional): torchrun's options besides
            ``--nproc_per_node`` (e.g. ``--nnodes``, ``--rdzv-endpoint``,
            ``--max-restarts``). Defaults to a free ``--master_port`` on this machine.
        train_args (list[str]): More options of ``tools/train.py`` (e.g. ``--resume``).
        script (str, optional): The training script. Defaults to mmdet3d's
            ``tools/train.py``.
    """
    if torchrun_args is None:
        torchrun_args = [f'--master_port={free_port()}']
    command = [sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={nproc}',
               *torchrun_args, script or mmdet3d_train_script(), config,
               '--launcher', 'pytorch', '--work-dir', work_dir, *train_args]
    if cfg_options:
        command += ['--cfg-options', *cfg_options]
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=repository_importable(env),
                               start_new_session=True)
    timed_out = stopped = False
    while True:
        waits = [] if deadline is None else [max(0.0, deadline - time.monotonic())]
        waits += [0.5] if stop_when else []
        try:
            # Retrying communicate() after its timeout loses no output (subprocess docs).
            output, _ = process.communicate(timeout=min(waits, default=None))
            break
        except subprocess.TimeoutExpired:
            stopped = bool(stop_when and stop_when())
            timed_out = not stopped and deadline is not None and time.monotonic() >= deadline
            if stopped or timed_out:
                kill_process_tree(process.pid)
                output, _ = process.communicate()
                break
    return TrainRun(command, process.returncode, output, time.monotonic() - start, timed_out,
                    stopped)
