"""How a stop verdict ends this rank: it waits while any rank writes a checkpoint (the
launcher kills every rank once one exits, and a checkpoint cut in the middle does not load),
runs the exit callbacks (the hook's files), writes torchrun's error file, counts itself out
and waits until every rank has read the verdict (a rank that leaves breaks the others'
collectives), then exits with :data:`EXIT_CODE`: the training thread, blocked in C++,
cannot be raised into.
"""
import json
import os
import sys
import time
from typing import Callable, List, Sequence

from ..messages.stall_guard_text import exit_callback_failed
from .phases import Phase
from .store_protocol import Verdict

EXIT_CODE = 1
#: The longest a stop waits for a checkpoint that a rank is writing, in seconds.
CHECKPOINT_WAIT = 120.0


def end_run(watchdog, verdict: Verdict, log: Callable[[str, bool], None],
            exit_callbacks: Sequence[Callable[[], None]]) -> None:
    """Ends ``watchdog``'s rank on a stop ``verdict``; see the module's docstring.

    Args:
        watchdog (StallWatchdog): This rank's watchdog (its position, store and waits).
        verdict (Verdict): The stop verdict.
        log (callable): ``log(message, is_error)``, the watchdog's.
        exit_callbacks (list[callable]): What the watchdog runs before the exit.
    """
    log(verdict.text, True)
    deadline = time.monotonic() + CHECKPOINT_WAIT
    while time.monotonic() < deadline and _writes_checkpoint(watchdog, verdict.checkpoint):
        time.sleep(watchdog.tick)
    if watchdog.rank in verdict.checkpoint:
        try:
            watchdog.store.withdraw()  # the others wait for this write to end
        except Exception:  # noqa: B902 - they stop waiting at the bound
            pass
    for callback in exit_callbacks:
        try:
            callback()
        except Exception as error:  # noqa: B902 - the exit must happen
            log(exit_callback_failed(error), True)
    _write_torchelastic_error_file(verdict.text)
    try:
        # No rank leaves before every rank has read the verdict: a rank that leaves
        # breaks the others' collectives, and one that has not read it yet would end
        # with that error instead of the diagnosis.
        ended = watchdog.store.count_out()
        deadline = time.monotonic() + watchdog.answer_wait
        while ended < watchdog.store.world_size and time.monotonic() < deadline:
            time.sleep(watchdog.tick / 2)
            ended = watchdog.store.counted_out()
    except Exception:  # noqa: B902 - the store's host may be gone already
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_CODE)


def _writes_checkpoint(watchdog, ranks: List[int]) -> bool:
    """Whether this rank, or one of ``ranks`` (which were writing one at the judgement),
    still writes a checkpoint."""
    if watchdog.position.phase == Phase.CHECKPOINT:
        return True
    for rank in ranks:
        if rank == watchdog.rank:
            continue
        try:
            position = watchdog.store.position(rank)
        except Exception:  # noqa: B902 - the writer's store host went: nothing to wait for
            return False
        if position is not None and position['phase'] == Phase.CHECKPOINT:
            return True
    return False


def _write_torchelastic_error_file(text: str) -> None:
    """torchrun shows this file in its ChildFailedError summary instead of '<N/A>' (what
    it shows for a worker that exited without a Python traceback)."""
    path = os.environ.get('TORCHELASTIC_ERROR_FILE')
    if not path or os.path.exists(path):
        return
    # torchrun prints the call stack, not the message, in its summary.
    message = dict(message=text, extraInfo=dict(py_callstack=text,
                                                 timestamp=str(int(time.time()))))
    try:
        with open(path, 'w') as file:
            json.dump(dict(message=message), file)
    except OSError:
        pass
