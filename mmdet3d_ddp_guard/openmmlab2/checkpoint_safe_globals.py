"""Lets ``torch.load(weights_only=True)`` read MMEngine's own checkpoints.

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

:func:`allow_mmengine_checkpoint_globals` allows exactly these, and weights-only loading
stays on for everything else. Why it is safe: none of them runs code chosen by the file.
Allowing a class lets the unpickler create an instance and set its attributes
(``HistoryBuffer.__setstate__`` stores the state and merges the statistics methods);
numpy's reconstructors only build arrays, dtypes and scalars from bytes; and ``getattr`` is
not allowed: the name ``builtins.getattr`` is bound to :func:`history_buffer_statistic`,
which returns one of HistoryBuffer's own four statistics methods and refuses anything else.
"""
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


def allow_mmengine_checkpoint_globals() -> bool:
    """Registers :func:`mmengine_checkpoint_globals` with ``add_safe_globals`` on a torch
    whose ``torch.load`` defaults to ``weights_only=True`` (2.6 and later); returns whether
    it did. An older torch loads MMEngine's checkpoints with ``weights_only=False`` already.
    """
    if digit_version(torch.__version__) < digit_version(WEIGHTS_ONLY_DEFAULT_SINCE):
        return False
    torch.serialization.add_safe_globals(mmengine_checkpoint_globals())
    return True
