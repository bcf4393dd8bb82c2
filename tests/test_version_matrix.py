"""tools/version_matrix.sh under CI's deadline: a leg that cannot end in time is left out,
loudly, in the fixed order of priority, and does not fail the run."""
import os
import re
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CI_LEGS = ['openmmlab1', 'torch1.9', 'torch1.12', 'torch2.14', 'torch1.13', 'torch2.1']


def test_ci_legs_past_the_deadline_are_left_out_loudly_in_priority_order():
    # A deadline that has passed: no leg fits, so none is built and none runs.
    run = subprocess.run(['bash', 'tools/version_matrix.sh', '--ci'], cwd=REPO,
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, DDP_GUARD_CI_DEADLINE=str(int(time.time()))))
    assert run.returncode == 0, run.stderr[-3000:]
    left_out = re.findall(r'\*\*\* LEFT OUT leg (\S+): it takes about \d+ min on this machine '
                          r'\(\d+ min on a quiet one, [\d.]+x slower now\), and only -?\d+ min '
                          r'are left before CI\'s limit\. Run it with: '
                          r'bash tools/version_matrix.sh \1 \*\*\*', run.stderr)
    assert left_out == CI_LEGS, run.stderr
    assert f'*** NOT RUN for lack of time: {" ".join(CI_LEGS)}' in run.stderr
    assert 'passed: none' in run.stderr
