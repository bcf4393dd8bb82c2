"""torch's own DDP tests pass with GuardedDDP in DDP's place, with no argument mapped and no
default changed but ``find_unused_parameters='auto'``: those of the installed wheel's
``distributed_test.py`` and ``ddp_under_dist_autograd_test.py`` that run on a CPU
(2 gloo ranks; 4 and 6 processes under RPC's distributed autograd), in their ranks, forked
as in CI or spawned as upstream runs them. Every rank counts the GuardedDDP it built, so a
test cannot pass without one; the few that fail are listed with their reason
(:mod:`tests.pytorch.torch_ddp_expected`), and a listed failure that passes, or an unlisted
one, fails here.

``DDP_GUARD_TORCH_SUITE=all`` runs every DDP test of those files instead of the ones that
run on a CPU: the others must skip (they need CUDA), else the list is out of date.
"""
import json
import os
import re
import sys
from typing import Dict, List

import pytest
import torch

from demo.launch import REPO
from tests.dist_utils import run_launcher
from tests.pytorch.torch_ddp_expected import Expected, expected_for
from tests.timeouts import scaled

pytestmark = pytest.mark.timeout(300)

EXPECTED = expected_for(torch.__version__)
if EXPECTED is None:
    pytestmark = [pytestmark, pytest.mark.skip(
        reason=f"torch's test files change with each release; the outcomes of their DDP "
        f'tests are measured on torch 1.9, 2.13 and 2.14, not {torch.__version__} '
        f'(python -m tests.pytorch.torch_ddp_suite --out FILE runs them here)')]


def _run_suite(tmp_path, test_ids: List[str], **environment) -> Dict[str, Dict]:
    """The outcomes of torch's tests ``test_ids`` (every DDP test when empty), each run in
    ranks of its own by :mod:`tests.pytorch.torch_ddp_suite`, in a process of its own."""
    out = str(tmp_path / 'outcomes.json')
    command = [sys.executable, '-m', 'tests.pytorch.torch_ddp_suite', '--out', out] + test_ids
    # torch's own per-test limit (300 s on torch 2, 100 on 1.9) would let one hang take the
    # whole budget; torch 1.9 reads no such variable.
    environment = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS='1',
                       DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(int(scaled(60))), **environment)
    # Past the limit, the run ends with its ranks, which torch's harness forks and which would
    # otherwise outlive it, hanging.
    run = run_launcher(command, timeout=240, env=environment, cwd=REPO)
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    with open(out) as outcomes:
        return json.load(outcomes)['results']


def _disagreements(results: Dict[str, Dict], expected: Expected, full: bool) -> List[str]:
    """Where the outcomes differ from what :mod:`tests.pytorch.torch_ddp_expected` lists."""
    found = []
    for test_id, result in results.items():
        outcome, detail, built = result['outcome'], result['detail'], sum(result['built'])
        if test_id not in expected.runs:
            if outcome != 'skipped':
                found.append(f'{test_id} {outcome} on a CPU: list it in runs')
            continue
        if test_id in expected.fails:
            reason, error = expected.fails[test_id]
            if outcome == 'passed':
                found.append(f'{test_id} passes now: take it off the failures ({reason})')
            elif outcome == 'failed' and not re.search(error, detail):
                found.append(f'{test_id} fails otherwise than listed ({reason}):\n{detail}')
        elif outcome == 'failed':
            found.append(f'{test_id} failed:\n{detail}')
        if outcome == 'skipped':
            found.append(f'{test_id} skipped ({detail}): take it off runs')
        # Only a pass counts every rank: where one fails, the others are ended unwritten.
        elif outcome == 'passed' and test_id in expected.builds_none and built:
            found.append(f'{test_id} built {built} GuardedDDP: take it off builds_none')
        elif outcome == 'passed' and test_id not in expected.builds_none and not built:
            found.append(f'{test_id} passed without building a GuardedDDP')
    if not full:
        found += [f'{test_id} did not run' for test_id in expected.runs if test_id not in results]
    return found


def test_torch_s_ddp_tests_pass_with_guarded_ddp_in_ddp_s_place(tmp_path):
    full = os.environ.get('DDP_GUARD_TORCH_SUITE') == 'all'
    results = _run_suite(tmp_path, [] if full else list(EXPECTED.runs))
    if full:
        assert set(EXPECTED.runs) <= set(results), 'listed tests that are not DDP tests here'
    found = _disagreements(results, EXPECTED, full)
    assert not found, '\n'.join(found)


def test_a_spawned_rank_builds_guarded_ddp_too(tmp_path):
    """Upstream spawns the ranks, which then import torch's tests anew: the substitution is
    made by that import, so it holds there as in the forked ranks."""
    test_id = 'DistributedTest.test_DistributedDataParallelCPU'
    result = _run_suite(tmp_path, [test_id], DDP_SUITE_START='spawn')[test_id]
    assert (result['outcome'], result['built']) == ('passed', [1, 1]), result['detail']


def test_the_lists_cannot_rot():
    expected = Expected(runs=('S.test_fails', 'S.test_passes', 'S.test_builds_none'),
                        fails={'S.test_fails': ('why', 'the error')},
                        builds_none={'S.test_builds_none': 'why'})

    def outcomes(**changed):
        results = dict(fails=('failed', 'the error', [1, 1]), passes=('passed', '', [1, 1]),
                       builds_none=('passed', '', [0, 0]), gpu=('skipped', 'CUDA', [0, 0]))
        results.update(changed)
        return {f'S.test_{name}': dict(outcome=outcome, detail=detail, built=built)
                for name, (outcome, detail, built) in results.items() if outcome}

    assert _disagreements(outcomes(), expected, full=True) == []
    assert _disagreements(outcomes(gpu=(None, '', [])), expected, full=False) == []
    for changed, says in [
            (dict(fails=('passed', '', [1, 1])), 'S.test_fails passes now'),
            (dict(fails=('failed', 'another error', [1, 1])), 'S.test_fails fails otherwise'),
            (dict(passes=('failed', 'boom', [1, 1])), 'S.test_passes failed'),
            (dict(passes=('passed', '', [0, 0])), 'S.test_passes passed without building'),
            (dict(passes=('skipped', 'CUDA', [0, 0])), 'S.test_passes skipped'),
            (dict(builds_none=('passed', '', [1, 0])), 'S.test_builds_none built 1'),
            (dict(gpu=('passed', '', [1, 1])), 'S.test_gpu passed on a CPU'),
            (dict(passes=(None, '', [])), 'S.test_passes did not run')]:
        found = _disagreements(outcomes(**changed), expected, full=False)
        assert len(found) == 1 and found[0].startswith(says), (changed, found)
