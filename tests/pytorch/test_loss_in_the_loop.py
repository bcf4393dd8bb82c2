"""The loss computed in the loop (``preds = model(x); loss = criterion(preds, y)``), as most
plain loops, Accelerate's examples and DETR-style criteria write it: a tensor the forward
returned that the loss leaves out (a scale without a target; rank 1 only in some iterations,
no rank in others) is not back-propagated. GuardedDDP trains it bit for bit as torch's
``DistributedDataParallel(model, find_unused_parameters=True)`` on 2 gloo ranks (parameters,
buffers, AdamW state, each step's gradients and losses, which gradients are None), and where
that DDP cannot (a dataclass output), as DDP trains the same model with the loss computed in
its forward: the same numbers, operation for operation."""
import pytest
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard.pytorch import GuardedDDP
from mmdet3d_ddp_guard.pytorch.step_errors import LATE_BACKWARD
from tests.dist_utils import DistributedRunError, run_distributed
from tests.pytorch.loops import CPU_GRAD_SCALER, plain_ddp_steps, side_by_side_runs
from tests.pytorch.test_plain_loop import assert_trains_as_reference

pytestmark = pytest.mark.timeout(300)

#: Whether torch's DDP hands the forward's outputs to its ``_DDPSink`` with undefined
#: gradients kept undefined (torch/nn/parallel/distributed.py, ``_post_forward``).
_SINK = getattr(torch.nn.parallel.distributed, '_DDPSink', None)
DDP_SINKS_OUTPUTS = _SINK is not None and \
    'set_materialize_grads' in _SINK.forward.__code__.co_names
UNDEFINED_GRADIENT = ('Encountered gradient which is undefined, but still allreduced by DDP '
                      'reducer. This indicates a bug in DDP implementation, please report a '
                      'bug with a repro to PyTorch.')

#: The outputs whose tensors torch's DDP hands to its ``_DDPSink`` (flattened as a pytree),
#: so that one the loss left out gets an undefined gradient: lists, dicts, nested ones.
SINKED_OUTPUTS = ('list', 'dict', 'aux')


def _reference_output(output: str) -> str:
    """What the reference's model returns: the same where torch's DDP trains that shape with
    the loss in the loop, else the loss (computed in its forward, the same numbers)."""
    return output if DDP_SINKS_OUTPUTS and output in SINKED_OUTPUTS else 'loss'


def test_the_loss_in_the_loop_trains_as_the_graph_search_in_every_output_shape():
    cases = [dict(output=output, reference_output=_reference_output(output),
                  accumulate=accumulate)
             for output in SINKED_OUTPUTS + ('dataclass', ) for accumulate in (1, 2)]
    for case, results in zip(cases, zip(*run_distributed(side_by_side_runs, cases))):
        assert_trains_as_reference(results)
        none_grads = results[0]['reference']['none_grads']
        # A head unused on every rank (None, skipped by AdamW) and on one rank only.
        assert any(none_grads) and not all(none_grads), case
        assert results[1]['unused_iterations'] > 0, case


@pytest.mark.parametrize('output', ['list', 'dataclass'])
def test_where_torch_s_graph_search_dies_with_the_loss_in_the_loop(output):
    """What docs/pytorch.md says of DDP here: a dataclass is no pytree node, so its sink
    does not wrap the dataclass's tensors while its graph search starts from them, and the
    left-out scale's parameters never get ready; a torch whose DDP has no such sink (1.9)
    does the same with any output, and its graph search does not look into a dataclass at
    all (every parameter marked unused before the backward reaches it). A list trains where
    the sink is (the test above)."""
    if output == 'list' and DDP_SINKS_OUTPUTS:
        pytest.skip(f"torch {torch.__version__}'s DDP trains it (the test above)")
    with pytest.raises(DistributedRunError) as error:
        run_distributed(plain_ddp_steps, output=output, find_unused_parameters=True,
                        timeout=120)
    dies_with = 'Expected to mark a variable ready only once' \
        if output == 'dataclass' and not DDP_SINKS_OUTPUTS else \
        'Expected to have finished reduction in the prior iteration'
    assert dies_with in str(error.value)


@pytest.mark.parametrize('style', ['amp', 'clip', 'compile'])
def test_the_loss_in_the_loop_as_users_write_it(style):
    """A GradScaler, clip_grad_norm_ between the backward and the step (it reads every
    gradient: the unused ones must be settled by then), torch.compile of the model."""
    if style == 'amp' and not CPU_GRAD_SCALER:
        pytest.skip(f'torch {torch.__version__} has no CPU GradScaler')
    if style == 'compile' and not hasattr(torch, 'compile'):
        pytest.skip(f'torch {torch.__version__} has no torch.compile')
    cases = [dict(style=style, output='list', reference_output=_reference_output('list'))]
    for results in zip(*run_distributed(side_by_side_runs, cases, timeout=240)):
        assert_trains_as_reference(results)


class TwoHeads(nn.Module):
    """Two heads on the input, no shared layer: two backwards, one per head, reach disjoint
    parameters, the only way plain DDP takes two backwards in one step."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.head_a, self.head_b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.head_a(x), self.head_b(x)


def _two_backwards(rank: int, world_size: int, wrap: str):
    """Three steps of ``a.sum().backward(retain_graph=True); b.sum().backward()``: how far
    ``wrap`` got and the first line of what it raised."""
    wrappers = dict(guarded=GuardedDDP, graph_search=lambda m: DistributedDataParallel(
        m, find_unused_parameters=True), plain=DistributedDataParallel)
    model = wrappers[wrap](TwoHeads())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        a, b = model(torch.randn(2, 4) + rank)
        try:
            a.sum().backward(retain_graph=True)
            b.sum().backward()
        except RuntimeError as error:
            return dict(steps=step, error=str(error).strip().splitlines()[0])
        optimizer.step()
        optimizer.zero_grad()
    return dict(steps=3, error=None, weights=[p.detach().clone() for p in model.parameters()])


@pytest.mark.parametrize('wrap', ['guarded', 'graph_search', 'plain'])
def test_two_backwards_into_disjoint_heads_in_one_step(wrap):
    """What docs/pytorch.md says, on the installed torch: plain DDP trains it (the two
    backwards reach disjoint parameters); the guard, as the graph search, ends the step at
    its first backward, where head_b is unused, and stops at the second with its error,
    naming head_b and the fix, before the optimizer step."""
    results = run_distributed(_two_backwards, wrap, timeout=120)
    if wrap == 'plain':
        assert [r['error'] for r in results] == [None, None]
        for mine, theirs in zip(results[0]['weights'], results[1]['weights']):
            assert torch.equal(mine, theirs)
    elif wrap == 'guarded':
        for result in results:
            assert result['steps'] == 0
            assert result['error'] in [LATE_BACKWARD.format(param=param, hook='your training loop')
                                       for param in ('head_b.weight', 'head_b.bias')], result
    else:
        # With its sink (torch >= 1.12 here), DDP's graph search reduces head_b's undefined
        # gradient in the first backward and fails at the second step's; without one (torch
        # 1.9), it searches from both outputs and waits for the second backward, as plain DDP.
        for result in results:
            if DDP_SINKS_OUTPUTS:
                assert (result['steps'], result['error']) == (1, UNDEFINED_GRADIENT), result
            else:
                assert result['error'] is None, result
