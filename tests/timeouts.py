"""Timeouts that grow with how slowly this machine runs.

A timeout in these tests is a hang detector: it must fail a test that hangs (DDP's failure
mode) in bounded time, and must not fail a test that is merely running on a 2-core CI
machine shared with other jobs. On 2026-11-30 such a machine gave this project's processes
a fraction of its cores: one rank's ``import torch`` took over a minute, a million-iteration
Python loop that takes 0.025 s on one of its cores took anywhere from 0.025 s to 2.3 s, and
the suite's tests ran past timeouts written for a quiet machine.

Each timeout is written for a quiet machine and multiplied by :func:`slowdown`, measured once
per session; ``DDP_GUARD_TEST_SLOWDOWN`` sets it instead (e.g. 1 to keep the written values).
"""
import functools
import os
import time

# Wall seconds for one million iterations of the loop below when the process has a core to
# itself (0.025 s measured on this project's 2-core machine, rounded up).
QUIET_SECONDS = 0.03
ROUNDS = 20
# Past this, a hang would hold CI for too long; a machine slower than this fails on time.
MOST = 6.0


def _million_additions() -> None:
    total = 0
    for number in range(1_000_000):
        total += number


def measured_slowdown(rounds: int = ROUNDS) -> float:
    """How many times slower than a quiet machine this one runs Python now, unclamped
    (tools/make_venv.sh prints it too, so that a slow CI log says why it is slow)."""
    start = time.perf_counter()
    for _ in range(rounds):
        _million_additions()
    return (time.perf_counter() - start) / rounds / QUIET_SECONDS


@functools.lru_cache(maxsize=None)
def slowdown() -> float:
    """How many times slower than a quiet machine this one runs Python now, 1 to MOST."""
    if os.environ.get('DDP_GUARD_TEST_SLOWDOWN'):
        return float(os.environ['DDP_GUARD_TEST_SLOWDOWN'])
    return min(max(measured_slowdown(), 1.0), MOST)


def scaled(seconds: float) -> float:
    """``seconds`` written for a quiet machine, on this one."""
    return seconds * slowdown()
