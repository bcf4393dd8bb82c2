"""What the guarded wrappers warn about at build: layers with a collective in their forward,
and parameters with sparse gradients, whose averages under the guard are the true ones where
the framework's own wrapper's may not be (:mod:`mmdet3d_ddp_guard.guard.sparse_gradients`)."""
from typing import Sequence

from .config_lines import ConfigLines


def forward_collectives_message(wrapper: str, layers: Sequence[str], total: int) -> str:
    """``layers``: ``name (Class)`` of the first ones named; ``total``: how many there are."""
    more = f' and {total - len(layers)} more' if total > len(layers) else ''
    return (
        f'{wrapper}: the model holds {total} layer(s) that run a collective in their '
        f'forward: {", ".join(layers)}{more}. If a branch holding one is skipped on some ranks '
        'and not on others in the same iteration, every rank waits in that collective before '
        "any backward (plain DDP hangs); no DDP option can make that train, and the guard's "
        "stall watchdog ends the run with the layer's name. Use BN or GN in branches that can "
        'be skipped, or run them on every rank; '
        '`python -m mmdet3d_ddp_guard check CONFIG --world-size N` predicts it.')


def sparse_gradients_message(names: Sequence[str], lines: ConfigLines) -> str:
    """``names``: the parameters that receive sparse gradients."""
    own = lines.own_wrapper
    return (f'{lines.wrapper}: {", ".join(names)} receive(s) sparse gradients. The guard '
            f'averages them into new tensors; {own} and DDP with find_unused_parameters=True '
            'divide them in place, which changes the gradient autograd still hands to other '
            "layers where an embedding's output is added to another layer's and the embedding "
            'was computed after it (pytorch/pytorch#34904): those layers then train on '
            '1/world_size of their averaged gradient there. So training under the guard may '
            f"differ from {own}: the guard's gradients are the true averages "
            '(docs/limits.md, "Sparse gradients").')
