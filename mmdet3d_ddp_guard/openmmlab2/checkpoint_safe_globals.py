"""Lets ``torch.load(weights_only=True)`` read MMEngine's own checkpoints, while MMEngine
loads one and nowhere else.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``, which refuses every global
it does not know. MMEngine 0.10.7 loads checkpoints with that default, and its checkpoints
hold, besides tensors and plain Python data, exactly these (found by saving real Runner
checkpoints and loading them with ``weights_only=True``):

- ``mmengine.logging.history_buffer.HistoryBuffer``: the message hub's logged scalars
  (``checkpoint['message_hub']['log_scalars']``), each holding two numpy arrays and, by
  reference, the statistics methods of the class (``HistoryBuffer.min``/``max``/
  ``current``/``mean``, pickled as ``getattr(HistoryBuffer, 'min')``);
- numpy arrays, dtypes and scalars (``numpy.core.multiarray._reconstruct``,
  ``numpy.ndarray``, ``numpy.dtype``, the dtype classes ``Float64DType`` and
  ``Int64DType``, and ``numpy.core.multiarray.scalar``): the buffers' histories and
  counts, and runtime values such as ``eta``.

:func:`mmengine_checkpoint_globals_allowed` allows exactly these, and weights-only loading
stays on for everything else. Why it is safe: none of them runs code chosen by the file.
Allowing a class lets the unpickler create an instance and set its attributes
(``HistoryBuffer.__setstate__`` stores the state and merges the statistics methods);
numpy's reconstructors only build arrays, dtypes and scalars from bytes; and ``getattr`` is
not allowed: the name ``builtins.getattr`` is bound to :func:`history_buffer_statistic`,
which returns one of HistoryBuffer's own four statistics methods and refuses anything else.

**Scope.** Only MMEngine's own checkpoint loading, not the process: torch's allowlist
(``torch.serialization.add_safe_globals``) is process-wide and outlives the load, so that
every ``torch.load`` of the process, the user's included, would accept these globals and
read ``builtins.getattr`` as this module's. Instead, :func:`allow_mmengine_checkpoint_globals`
(on torch >= 2.6, called by :mod:`.import_changes`) wraps
``mmengine.runner.checkpoint.CheckpointLoader.load_checkpoint`` in torch's
``torch.serialization.safe_globals`` context manager (torch >= 2.5), which adds them for the
call and removes them after. That classmethod is the one place every MMEngine load goes
through: ``Runner.load_checkpoint`` (``load_from``) and ``Runner.resume`` (``--resume``)
through ``_load_checkpoint``, FlexibleRunner's strategies, ``mmengine.runner.load_checkpoint``
(mmdet3d's ``init_model``), for every scheme (local files, URLs, ``open-mmlab://``). Wrapping
``Runner.load_checkpoint`` alone would miss FlexibleRunner's resume, and wrapping
``_load_checkpoint`` would mean rebinding it in each module that imported it by name. The
limit: while a load runs, torch's allowlist is the process's, so another thread's
``torch.load`` at that moment accepts them too (torch has no narrower scope).
"""
import contextlib
import functools
import pickle

import numpy as np
import torch
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.utils import digit_version

#: torch.load's default became weights_only=True in this torch release.
WEIGHTS_ONLY_DEFAULT_SINCE = '2.6.0'

#: The statistics methods HistoryBuffer registers for itself (``_set_default_statistics``).
HISTORY_BUFFER_STATISTICS = ('min', 'max', 'current', 'mean')


def history_buffer_statistic(owner, name: str):
    """Stands in for ``getattr`` while unpickling: only ``getattr(HistoryBuffer, name)`` for
    one of :data:`HISTORY_BUFFER_STATISTICS`, which is how a checkpoint names them."""
    if owner is not HistoryBuffer or name not in HISTORY_BUFFER_STATISTICS:
        raise pickle.UnpicklingError(
            f'mmdet3d_ddp_guard: weights-only loading refuses getattr({owner!r}, {name!r}); '
            'only the statistics methods of mmengine\'s HistoryBuffer '
            f'{HISTORY_BUFFER_STATISTICS} are allowed. If you trust this checkpoint, load it '
            'with torch.load(..., weights_only=False).')
    return getattr(HistoryBuffer, name)


def mmengine_checkpoint_globals() -> list:
    """The globals an MMEngine checkpoint holds beyond weights-only loading's defaults.

    The numpy functions are taken from what this numpy pickles (their module moved in
    numpy 2), and the dtype classes are those of HistoryBuffer's arrays: float64 values,
    int64 counts.
    """
    array_reconstructor = np.zeros(1).__reduce__()[0]
    scalar_reconstructor = np.float64(0).__reduce__()[0]
    numpy_globals = [array_reconstructor, np.ndarray, np.dtype, scalar_reconstructor,
                     type(np.dtype(np.float64)), type(np.dtype(np.int64))]
    return [HistoryBuffer, (history_buffer_statistic, 'builtins.getattr'), *numpy_globals]


@contextlib.contextmanager
def mmengine_checkpoint_globals_allowed():
    """:func:`mmengine_checkpoint_globals` in torch's weights-only allowlist inside the
    ``with`` block only. Those the allowlist held already (added by the user) stay after
    it: torch's ``safe_globals`` removes on exit what it was given."""
    held = torch.serialization.get_safe_globals()
    missing = [item for item in mmengine_checkpoint_globals() if item not in held]
    with torch.serialization.safe_globals(missing):
        yield


def allow_mmengine_checkpoint_globals() -> bool:
    """On a torch whose ``torch.load`` defaults to ``weights_only=True`` (2.6 and later),
    makes MMEngine's ``CheckpointLoader.load_checkpoint`` load within
    :func:`mmengine_checkpoint_globals_allowed`; returns whether it wrapped it (not when
    wrapped already). An older torch loads MMEngine's checkpoints with
    ``weights_only=False`` already."""
    if digit_version(torch.__version__) < digit_version(WEIGHTS_ONLY_DEFAULT_SINCE):
        return False
    from mmengine.runner.checkpoint import CheckpointLoader
    load_checkpoint = CheckpointLoader.__dict__['load_checkpoint'].__func__
    if getattr(load_checkpoint, 'ddp_guard_safe_globals', False):
        return False

    @functools.wraps(load_checkpoint)
    def loading_with_mmengine_globals(cls, *args, **kwargs):
        with mmengine_checkpoint_globals_allowed():
            return load_checkpoint(cls, *args, **kwargs)

    loading_with_mmengine_globals.ddp_guard_safe_globals = True
    CheckpointLoader.load_checkpoint = classmethod(loading_with_mmengine_globals)
    return True
