"""torch's own DDP tests, run with GuardedDDP in DDP's place.

The installed wheel ships torch's distributed tests: ``DistributedTest._DistTestBase`` of
``torch/testing/_internal/distributed/distributed_test.py``, which upstream runs through
``test/distributed/test_distributed_spawn.py`` with ``BACKEND=gloo``, and DDP under RPC's
distributed autograd (``ddp_under_dist_autograd_test.py``, upstream's
``test/distributed/rpc/test_tensorpipe_agent.py``). This module runs those of their tests
that build a ``DistributedDataParallel`` or are named for it, as upstream does (2 gloo
ranks; 4 and 6 processes under RPC), with :class:`~mmdet3d_ddp_guard.pytorch.GuardedDDP`
where the tests look DDP up: ``torch.nn.parallel.DistributedDataParallel`` (also their
``nn.parallel.DistributedDataParallel``) and each test module's own global name. Nothing
maps an argument: every call reaches GuardedDDP as the test wrote it,
``find_unused_parameters`` left out included (so ``'auto'``, the guard's only changed
default).

It runs in a process of its own, ``python -m tests.pytorch.torch_ddp_suite --out FILE
[Suite.test_name ...]``, never in pytest's: the substitution and the environment that torch's
tests read at import would reach every later test of the session. The substitution is made
at this module's import, so a spawned rank, which imports it to find its test, has it too.
Each rank counts the GuardedDDP it built, so that a test passing without one is seen
(:mod:`tests.pytorch.test_torch_ddp_suite` checks the outcomes).
"""
import argparse
import inspect
import json
import os
import re
import sys
import tempfile
import time
import types
import unittest
from typing import Dict, List

# torch's test modules read these at import: 2 gloo ranks, as upstream's CPU CI runs them.
os.environ.setdefault('BACKEND', 'gloo')
os.environ.setdefault('WORLD_SIZE', '2')
# torch 1.x's test base downloads upstream's lists of slow and disabled tests, where it can,
# and skips what they name: the outcomes would depend on the network and the day.
os.environ.setdefault('PYTORCH_RUN_DISABLED_TESTS', '1')


def _expecttest_stand_in() -> None:
    """torch's TestCase derives from expecttest's, which adds inline-snapshot assertions
    that no DDP test uses; the legs' venvs do not install it (torch does not depend on it),
    so without it a plain unittest base stands in."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType('expecttest')
        stand_in.ACCEPT = False
        stand_in.TestCase = unittest.TestCase
        sys.modules['expecttest'] = stand_in


_expecttest_stand_in()

import torch  # noqa: E402
import torch.nn.parallel  # noqa: E402
from torch.testing._internal.common_distributed import MultiProcessTestCase  # noqa: E402
from torch.testing._internal.distributed import (  # noqa: E402
    ddp_under_dist_autograd_test, distributed_test)
from torch.testing._internal.distributed.rpc import (  # noqa: E402
    tensorpipe_rpc_agent_test_fixture)

from mmdet3d_ddp_guard.pytorch import GuardedDDP  # noqa: E402

torch.nn.parallel.DistributedDataParallel = GuardedDDP
distributed_test.DistributedDataParallel = GuardedDDP
ddp_under_dist_autograd_test.DistributedDataParallel = GuardedDDP

#: GuardedDDP built in this process (a rank: one test's), counted around its own __init__,
#: which gets every argument as it was passed.
BUILT = [0]
_guarded_init = GuardedDDP.__init__


def _counting_init(self, *args, **kwargs):
    BUILT[0] += 1
    _guarded_init(self, *args, **kwargs)


_counting_init.__signature__ = inspect.signature(_guarded_init)
GuardedDDP.__init__ = _counting_init

START_METHOD = os.environ.get('DDP_SUITE_START', 'fork')


class _ForkedCounting:
    """What upstream's spawn helpers do (``TestDistBackendWithSpawn``, rpc_utils'
    ``SpawnHelper``), the ranks forked from this process (a spawned rank imports torch's
    test modules again: seconds per rank, a hundred tests), each writing how many GuardedDDP
    it built."""

    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context(START_METHOD).Process)

    def run_test(self, test_name: str, parent_pipe) -> None:
        BUILT[0] = 0
        try:
            super().run_test(test_name, parent_pipe)
        finally:
            with open(os.path.join(os.environ['DDP_SUITE_COUNTS'],
                                   f'{type(self).__name__}.{test_name}.{self.rank}'),
                      'w') as counts:
                counts.write(str(BUILT[0]))


class DistributedTest(_ForkedCounting, distributed_test.TestDistBackend,
                      distributed_test.DistributedTest._DistTestBase):
    pass


class DdpUnderDistAutogradTest(_ForkedCounting,
                               ddp_under_dist_autograd_test.DdpUnderDistAutogradTest,
                               tensorpipe_rpc_agent_test_fixture.TensorPipeRpcAgentTestFixture,
                               MultiProcessTestCase):
    pass


class DdpComparisonTest(_ForkedCounting, ddp_under_dist_autograd_test.DdpComparisonTest,
                        tensorpipe_rpc_agent_test_fixture.TensorPipeRpcAgentTestFixture,
                        MultiProcessTestCase):
    pass


SUITES = {suite.__name__: suite
          for suite in (DistributedTest, DdpUnderDistAutogradTest, DdpComparisonTest)}


def _source(suite: type, name: str) -> str:
    function = getattr(suite, name, None)
    try:
        return inspect.getsource(inspect.unwrap(function)) if callable(function) else ''
    except (OSError, TypeError):
        return ''


def ddp_tests() -> List[str]:
    """Every test of :data:`SUITES` named for DDP or that builds a DistributedDataParallel,
    in its own body or in a helper of its class it calls (``self._test_...(...)``), as
    ``Suite.test_name``."""
    selected = []
    for suite_name, suite in SUITES.items():
        builds: Dict[str, bool] = {}

        def builds_ddp(name: str) -> bool:
            if name not in builds:
                builds[name] = False  # until decided: helpers that call each other end
                source = _source(suite, name)
                builds[name] = (re.search(r'DistributedDataParallel\s*\(', source) is not None
                                or any(builds_ddp(helper)
                                       for helper in re.findall(r'self\.(_\w+)\(', source)))
            return builds[name]

        selected += [f'{suite_name}.{name}' for name in sorted(dir(suite))
                     if name.startswith('test_') and (re.search('ddp', name, re.IGNORECASE)
                                                     or builds_ddp(name))]
    return selected


def run(test_ids: List[str]) -> Dict[str, Dict]:
    """Runs ``test_ids``; each one's outcome, seconds, error and GuardedDDP built per rank."""
    results = {}
    with tempfile.TemporaryDirectory() as counts_dir:
        os.environ['DDP_SUITE_COUNTS'] = counts_dir
        for test_id in test_ids:
            suite_name, name = test_id.split('.')
            result = unittest.TestResult()
            start = time.monotonic()
            SUITES[suite_name](name).run(result)
            seconds = time.monotonic() - start
            if result.skipped:
                outcome, detail = 'skipped', result.skipped[0][1]
            elif result.errors or result.failures:
                outcome, detail = 'failed', (result.errors + result.failures)[0][1]
            else:
                outcome, detail = 'passed', ''
            by_rank = {}
            for file_name in os.listdir(counts_dir):
                if file_name.startswith(test_id + '.'):
                    with open(os.path.join(counts_dir, file_name)) as counts:
                        by_rank[int(file_name.rsplit('.', 1)[1])] = int(counts.read())
            built = [by_rank[rank] for rank in sorted(by_rank)]
            results[test_id] = dict(outcome=outcome, seconds=round(seconds, 2),
                                    detail=detail, built=built)
            print(f'{outcome:8} {seconds:6.1f} s  built {built}  {test_id}', flush=True)
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', required=True, help='the outcomes, as JSON')
    parser.add_argument('tests', nargs='*', help="default: every DDP test of torch's")
    args = parser.parse_args(argv)
    names = args.tests or ddp_tests()
    results = run(names)
    with open(args.out, 'w') as out:
        json.dump(dict(torch=torch.__version__, results=results), out, indent=1)


if __name__ == '__main__':
    main()
