"""The test harness's ranks can use CUDA: its fork server, started as every multi-rank test
starts it, initialises no CUDA runtime before it forks them (on a GPU machine a rank forked
after that dies with "Cannot re-initialize CUDA in forked subprocess").

A CPU machine has no CUDA runtime to initialise, so the fork server is started with
:mod:`tests.cuda_runtime_probe` imported first, which imitates a GPU machine and records
each call into the CUDA runtime with its stack; a rank forked from it reports the calls.
"""
import json
import os
import subprocess
import sys
from typing import List

import pytest

from tests.timeouts import scaled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# In a fresh interpreter, whose fork server is the first this process starts: the harness's
# own start-up (tests.dist_utils), with the probe imported before the harness's preload.
RANK_REPORT = '''
import json, sys
if sys.argv[1] == 'as_started':
    try:
        import mmdet3d  # the harness preloads mmdet3d's models when the session imported it
    except ImportError:
        pass
from tests import dist_utils
from tests.cuda_runtime_probe import recorded_calls
if sys.argv[1] == 'without_start':
    dist_utils.FORK_SERVER_START = 'tests.cuda_runtime_probe'
dist_utils.PRELOADED.insert(0, 'tests.cuda_runtime_probe')
print(json.dumps(dist_utils.run_distributed(recorded_calls, world_size=1, timeout=150)[0]))
'''


def fork_server_cuda_calls(*variants: str) -> List[List[str]]:
    """Per variant, the calls into the CUDA runtime that the fork server made before it
    forked a rank; the variants' interpreters run side by side."""
    env = dict(os.environ, PYTHONPATH=ROOT, DDP_GUARD_TEST_WORLD_SIZE='1',
               DDP_GUARD_TEST_BACKEND='gloo')
    processes = [subprocess.Popen([sys.executable, '-c', RANK_REPORT, variant], cwd=ROOT,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for variant in variants]
    reports = []
    for process in processes:
        output, errors = process.communicate(timeout=scaled(200))
        assert process.returncode == 0, errors[-3000:]
        reports.append(json.loads(output.strip().splitlines()[-1]))
    return reports


@pytest.mark.timeout(240)
def test_the_fork_server_leaves_the_cuda_runtime_untouched():
    """With a live check beside it: without the harness's first import, MMEngine's own
    import-time ``torch.cuda.is_available()`` reaches the runtime, and the probe names it."""
    calls, without_start = fork_server_cuda_calls('as_started', 'without_start')
    assert calls == [], ('the harness\'s fork server called into the CUDA runtime before '
                         'forking its ranks; on a GPU machine they could not use CUDA:\n\n'
                         + '\n'.join(calls))
    assert any('mmengine/device/utils.py' in call for call in without_start), without_start
