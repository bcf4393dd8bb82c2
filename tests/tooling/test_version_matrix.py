"""tools/version_matrix.sh under CI's deadline: a leg that cannot end in time is left out,
loudly, in the fixed order of priority, and does not fail the run; the openmmlab1 and pytorch
legs (each the only test of an adapter with its framework alone) are never left out, and the
suite's slowest tests give way instead (tests/ci_budget.py)."""
import os
import re
import subprocess
import sys
import time

from tests import ci_budget

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# openmmlab1 and pytorch run first, with --ci-first, and are never left out (the suite gives
# way).
FIRST_LEGS = ['openmmlab1', 'pytorch']
CI_LEGS = ['torch1.9', 'torch2.14', 'torch1.13', 'torch2.1', 'mmengine_forms']


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


def test_the_first_legs_run_before_the_suite_and_never_past_a_deadline():
    with open(os.path.join(REPO, 'Makefile')) as makefile:
        recipe = makefile.read().split('\ntest: venv\n')[1].split('\n\n')[0].split('\n')
    assert [line.strip() for line in recipe] == ['bash tools/ci_test.sh']
    with open(os.path.join(REPO, 'tools', 'ci_test.sh')) as script:
        steps = [line.strip() for line in script if re.match(
            r'\s*(setsid )?(bash tools/version_matrix\.sh|\$PY -m pytest)', line)]
    # The other legs' venvs build beside the suite; their tests run after it.
    assert steps == [
        'bash tools/version_matrix.sh --ci-first',
        'setsid bash tools/version_matrix.sh --ci-build >"$build_log" 2>&1 &',
        '$PY -m pytest tests -p no:cacheprovider -q --durations=25',
        'bash tools/version_matrix.sh --ci']
    with open(os.path.join(REPO, 'tools', 'version_matrix.sh')) as script:
        legs = re.findall(r'^  "(\w[\w.]*)\|[^"]*\|(first|yes|no)\|\d+\|\d+"$', script.read(),
                          re.MULTILINE)
    assert [name for name, ci in legs if ci == 'first'] == FIRST_LEGS
    assert [name for name, ci in legs if ci == 'yes'] == CI_LEGS


def test_the_suite_s_slowest_tests_give_way_in_order_until_it_fits(monkeypatch):
    monkeypatch.setattr(ci_budget, 'SUITE_SECONDS', 600)
    monkeypatch.setattr(ci_budget, 'GIVE_WAY', (('a', 200), ('b', 100), ('c', 50)))
    collected = ['a', 'b', 'c', 'd']
    assert ci_budget.tests_that_give_way(float('inf'), 3.0, collected) == []
    assert ci_budget.tests_that_give_way(1800, 3.0, collected) == []
    assert ci_budget.tests_that_give_way(1500, 3.0, collected) == ['a']
    assert ci_budget.tests_that_give_way(1000, 3.0, collected) == ['a', 'b']
    assert ci_budget.tests_that_give_way(1500, 3.0, ['b', 'c']) == ['b']


def test_every_test_that_gives_way_exists():
    for node_id, seconds in ci_budget.GIVE_WAY:
        path, name = node_id.split('::')
        with open(os.path.join(REPO, path)) as test_file:
            assert f'def {name.split("[")[0]}(' in test_file.read(), node_id
        assert seconds > 0


def test_past_the_deadline_the_suite_s_slowest_tests_give_way_loudly():
    """The conftest's wiring, in a real collection: with no time left, every test of
    GIVE_WAY among those collected is deselected and named, with the command that runs them."""
    files = sorted({node_id.split('::')[0] for node_id, _ in ci_budget.GIVE_WAY})
    run = subprocess.run(
        [sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider',
         *files], cwd=REPO, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, DDP_GUARD_CI_DEADLINE=str(int(time.time())),
                 DDP_GUARD_TEST_SLOWDOWN='1'))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f'{len(ci_budget.GIVE_WAY)} deselected' in run.stdout, run.stdout[-3000:]
    named = re.search(r'\*\*\* GAVE WAY to CI\'s deadline .*: (\d+) tests not run here\. Run '
                      r'them with: \.venv/bin/python -m pytest (.*) \*\*\*', run.stdout)
    assert named and int(named.group(1)) == len(ci_budget.GIVE_WAY), run.stdout[-3000:]
    assert sorted(named.group(2).split()) == sorted(node for node, _ in ci_budget.GIVE_WAY)
