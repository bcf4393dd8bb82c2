"""The harness's launcher runs (``run_launcher``: torchrun and its workers, which it starts in
sessions of their own) fail a hang with every Python thread's stack of the launcher and of
its workers, and leave no worker running after the test."""
import os
import re
import sys

import pytest

from tests.dist_utils import DistributedRunError, run_launcher

# A launcher that starts a worker in a session of its own, as torchrun does, and both wait
# forever; the worker says its pid first.
WORKER = '''
import os, time
def the_worker_waits_forever():
    time.sleep(600)
print('worker pid', os.getpid(), flush=True)
the_worker_waits_forever()
'''
LAUNCHER = f'''
import subprocess, sys, time
subprocess.Popen([sys.executable, '-c', {WORKER!r}], start_new_session=True)
def the_launcher_waits_forever():
    time.sleep(600)
the_launcher_waits_forever()
'''


def _alive(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as stat:
            return stat.read().rpartition(')')[2].split()[0] != 'Z'
    except OSError:
        return False


@pytest.mark.timeout(120)
def test_a_hanging_launch_fails_with_every_stack_and_leaves_no_worker():
    with pytest.raises(DistributedRunError) as raised:
        run_launcher([sys.executable, '-c', LAUNCHER], timeout=3, env=dict(os.environ))
    error = str(raised.value)
    assert 'the_worker_waits_forever' in error and 'the_launcher_waits_forever' in error, error
    worker = int(re.search(r'worker pid (\d+)', error).group(1))
    assert not _alive(worker)
