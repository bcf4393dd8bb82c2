"""What the stall guard keeps per process, in one object that a wrapper's watchdog installs
and uninstalls: :data:`PROCESS_STALL_GUARD`.

A process trains one model at a time, so some of the stall guard's state is the process's,
not a wrapper's:

- the watchdog that runs, the newest wrapper's (a sweep or a notebook builds the wrapper
  that trains next while the last one is alive), held weakly with its model's class name;
- how many watchdogs the process has built: ranks build their wrappers in the same order,
  so the n-th watchdog of every rank shares its store keys;
- the position that stepped last: the training thread works for it, and another wrapper's
  watchdog (a benchmark or a test holds several) does not take its stillness for a stall;
- the recording of collectives (:class:`~.recording_functions.CollectiveRecording`):
  ``torch.distributed``'s functions are the recording ones exactly while a watchdog is
  installed.

:meth:`ProcessStallGuard.install` and :meth:`ProcessStallGuard.uninstall` are the only ways
in and out; ``tests/test_process_stall_guard.py`` holds the package to having no other state
of the stall guard at module level, and to leaving ``torch.distributed`` as torch's once the
last watchdog is uninstalled.
"""
import itertools
import weakref
from typing import Optional

from .recording_functions import CollectiveRecording


class ProcessStallGuard:
    """This process's running watchdog, its collectives' recording and the position that
    stepped last (see the module's docstring)."""

    def __init__(self):
        self.recording = CollectiveRecording()
        self._watchdog: Optional['weakref.ref'] = None
        self._model = ''
        self._built = itertools.count()
        self._last_stepped: Optional['weakref.ref'] = None

    def next_store_prefix(self) -> int:
        """The number of the watchdog about to be built, which names its store keys."""
        return next(self._built)

    def install(self, watchdog, model: str) -> Optional[str]:
        """Makes ``watchdog`` (a :class:`~.stall_watchdog.StallWatchdog`, whose module
        imports this one, of a ``model`` class) this process's, recording into its
        position's log; returns the class name of the model whose running watchdog it
        stopped (None where none ran), for the caller to warn about."""
        earlier = self.running()
        earlier_model = None
        if earlier is not None:
            earlier.stop()
            earlier_model = self._model
        self._watchdog, self._model = weakref.ref(watchdog), model
        self.recording.activate(watchdog.position.collectives)
        # A wrapper collected without stop() (a benchmark's, a test's) records nothing after.
        weakref.finalize(watchdog, self.recording.deactivate, watchdog.position.collectives)
        return earlier_model

    def uninstall(self, watchdog) -> None:
        """``watchdog`` stopped: its log records no more; with no log recording,
        ``torch.distributed`` holds torch's own functions again."""
        self.recording.deactivate(watchdog.position.collectives)

    def running(self):
        watchdog = self._watchdog() if self._watchdog is not None else None
        return None if watchdog is None or watchdog.stopped else watchdog

    def stepped(self, position: 'weakref.ref') -> None:
        """The training thread starts a step of ``position``'s wrapper (a weak reference)."""
        self._last_stepped = position

    def steps_for(self, position: 'weakref.ref') -> bool:
        """Whether the training thread works for ``position``: no other wrapper of this
        process has stepped since it did. A wrapper that stepped and was collected (an
        evaluation model) holds nothing."""
        stepping = self._last_stepped
        return stepping is None or stepping is position or stepping() is None


#: The one of this process.
PROCESS_STALL_GUARD = ProcessStallGuard()
