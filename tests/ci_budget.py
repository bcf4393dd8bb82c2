"""What gives way when CI's deadline cannot fit the whole suite.

``make test`` runs the openmmlab1 leg first, whatever the time (it is the only test of the
mmcv 1.x adapter), then this suite, then the other legs, each left out when it cannot end
before the deadline (tools/version_matrix.sh). So on a machine too slow for everything, the
suite's slowest tests give way instead of that leg: with ``DDP_GUARD_CI_DEADLINE`` set (by
.ci/run), when the suite's estimated time at this machine's speed would not end before the
deadline, the tests of :data:`GIVE_WAY` are deselected in order, loudly, until it would.
Each is also run elsewhere in a smaller form, or covers a claim another test backs.
"""
import os
import time
from typing import List, Sequence, Tuple

#: The whole suite on a quiet 2-core machine, in seconds (the last lines of ``make test``'s
#: ``--durations`` and its total; measured 2026-12-02, docs/compatibility.md).
SUITE_SECONDS = 660

#: (node id, seconds on a quiet machine), slowest first, from the same measurement.
GIVE_WAY: Sequence[Tuple[str, float]] = ()


def tests_that_give_way(seconds_left: float, slowdown: float,
                        collected: Sequence[str]) -> List[str]:
    """The node ids to deselect so that the suite, at ``slowdown`` times a quiet machine's
    time, ends within ``seconds_left``; only ids in ``collected`` count."""
    estimate = SUITE_SECONDS * slowdown
    chosen = []
    for node_id, seconds in GIVE_WAY:
        if estimate <= seconds_left:
            break
        if node_id in collected:
            chosen.append(node_id)
            estimate -= seconds * slowdown
    return chosen


def seconds_before_deadline() -> float:
    """Seconds left before ``DDP_GUARD_CI_DEADLINE``; infinite without one."""
    deadline = os.environ.get('DDP_GUARD_CI_DEADLINE')
    return float('inf') if not deadline else float(deadline) - time.time()
