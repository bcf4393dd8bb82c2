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

from ..messages.config_lines import ConfigLines
from ..messages.framework_names import MMENGINE
from .decision_policy import Mode
from .param_table import ParamTable


def sparse_gradients_notice(table: ParamTable, mode: Mode,
                            lines: ConfigLines) -> Optional[str]:
    """The warning for a model with sparse gradients trained through the guard's comm hook
    (modes 'complete' and 'strict'); None otherwise."""
    if not table.sparse or mode not in (Mode.COMPLETE, Mode.STRICT):
        return None
    names = ', '.join(table.names[i] for i in sorted(table.sparse))
    own = ("MMEngine's MMDistributedDataParallel" if lines.framework == MMENGINE
           else "mmcv's MMDistributedDataParallel")
    return (f'{lines.wrapper}: {names} receive(s) sparse gradients. The guard averages them '
            f'into new tensors; {own} and DDP with find_unused_parameters=True divide them '
            'in place, which changes the gradient autograd still hands to other layers where '
            "an embedding's output is added to another layer's and the embedding was "
            'computed after it (pytorch/pytorch#34904): those layers then train on '
            '1/world_size of their averaged gradient there. So training under the guard may '
            f'differ from {own}: the guard\'s gradients are the true averages '
            '(docs/limits.md, "Sparse gradients").')
