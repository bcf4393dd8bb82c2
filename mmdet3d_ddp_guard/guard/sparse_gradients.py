"""What the guard says at build about parameters with sparse gradients: it averages them as
they should be, where DDP's own reducer, without a comm hook, may not.

DDP's reducer divides a sparse gradient by the world size in place when no comm hook is
registered (``Reducer::mark_variable_ready_sparse``, since pytorch/pytorch#34904). An
embedding's backward returns values that are a view of the gradient it received, and autograd
may still hand that gradient to another layer: where the embedding's output is added to that
layer's and autograd reaches the embedding first (it was computed later in the forward), that
layer, and every layer before it, receives its gradient divided by the world size before DDP
divides it again. The guard's comm hook divides into a new tensor (``unused_counts_comm_hook``),
so its averages are the true ones (``tests/test_sparse_gradients.py`` holds them to an
independent computation), and training then differs from the framework's own wrapper and from
DDP's graph search, which train on the twice-divided gradients. A change of training, so it
is said at build, once, as a warning.
"""
from typing import Optional

from ..messages.build_warnings import sparse_gradients_message
from ..messages.config_lines import ConfigLines
from .decision_policy import Mode
from .param_table import ParamTable


def sparse_gradients_notice(table: ParamTable, mode: Mode,
                            lines: ConfigLines) -> Optional[str]:
    """The warning for a model with sparse gradients trained through the guard's comm hook
    (modes 'complete' and 'strict'); None otherwise."""
    if not table.sparse or mode not in (Mode.COMPLETE, Mode.STRICT):
        return None
    return sparse_gradients_message([table.names[i] for i in sorted(table.sparse)], lines)
