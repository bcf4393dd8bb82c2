"""Sparse gradients in every place of DDP's bucket order, for tests/test_sparse_gradients.py.

``nn.Embedding(sparse=True)`` gets a bucket of its own in DDP. For the first backward DDP
orders its buckets by registration: registered first, the embedding's bucket is the last (the
bucket that carries the guard's counts), registered last, the first. Then DDP rebuilds them
in the order the gradients arrived, 1 MiB in the first: an embedding registered in the middle,
with wide layers after it that fill that first bucket, then has a bucket in the middle. The
test checks each place on the DDP at hand.

Where the embedding's output is added to another layer's, a second thing matters: whether
autograd reaches the embedding before or after that layer in the backward. An embedding's
backward returns its sparse gradient with values that are a view of the gradient it received,
and autograd still passes that gradient to the other layer. DDP's reducer without a comm hook
(MMEngine's and mmcv's own wrappers, DDP's graph search) divides the sparse gradient by the
world size in place (``Reducer::mark_variable_ready_sparse``): when the embedding was computed
after the other layer in the forward, autograd runs its backward first, and the other layer
(and every layer before it) then receives a gradient divided by the world size, which DDP
divides again. Those layers train on ``1 / world_size`` of their true gradient: the issue
that found it saw the guard's gradients differ from MMEngine's wrapper's and took the guard
for the wrong one; the guard's are the true averages.

So every case trains three ways, and the test compares every rank's weights, buffers and
optimizer state bit for bit:

- the guard, with the sparse embedding;
- the framework's own wrapper with a dense embedding, on DDP's fast path: the independent
  computation of the true averages, which the guard must equal everywhere. A rank that skips
  the embedding adds it times zero instead (the same forward values and gradients elsewhere,
  zeros for the embedding, which SGD without momentum applies as no change), so that no
  graph search is needed: DDP's graph search itself trains accumulation wrong before torch
  2.4 (pytorch/pytorch#69031). Nothing divides a dense gradient in place;
- the framework's own wrapper with the sparse embedding, where every rank uses it: equal to
  both where its in-place division touches no gradient still in use (embedding computed
  first), different where it does. Where some rank leaves it unused, DDP's graph search
  cannot train it (``Expected sparse gradient to be defined`` on that rank, pytorch/pytorch
  #80496, while the others wait in the all-reduce), so it is not tried.
"""
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from mmdet3d_ddp_guard.environment.ddp_compat import bucket_buffer, bucket_index
from tests.ddp_contract import dense_copy, load_adapter
from tests.dist_utils import collect_earlier_runs

ITERATIONS = 4
VOCABULARY = 32
TOKENS = 4
HIDDEN = 8
#: Wide enough that the layers registered after a middle embedding fill DDP's first bucket
#: (1 MiB) on their own, so that the embedding's bucket is neither the first nor the last.
WIDE = 2**15


class SparsePlacementNet(nn.Module):
    """``stem -> body (+ embedding) -> wide -> head``, the embedding registered ``first``,
    in the ``middle`` (after body) or ``last``, and computed ``before`` or ``after`` the body
    whose output it is added to."""

    def __init__(self, registered: str, computed: str, sparse: bool,
                 zero_when_skipped: bool = False):
        super().__init__()
        embedding = nn.Embedding(VOCABULARY, HIDDEN, sparse=sparse)
        # Only a middle embedding needs the wide layers (and their cost).
        self.width = WIDE if registered == 'middle' else HIDDEN
        layers = [('stem', nn.Linear(4, HIDDEN)), ('body', nn.Linear(HIDDEN, HIDDEN)),
                  ('wide', nn.Linear(HIDDEN, self.width)), ('head', nn.Linear(self.width, 1))]
        at = dict(first=0, middle=2, last=len(layers))[registered]
        layers.insert(at, ('embedding', embedding))
        for name, layer in layers:
            self.add_module(name, layer)
        self.computed = computed
        self.zero_when_skipped = zero_when_skipped

    def forward(self, tokens, use_branch=True, use_embedding=True):
        inputs = torch.stack([torch.sin(tokens * (k + 1.0)) for k in range(4)], dim=1)
        hidden = self.stem(inputs).relu()
        if not (use_embedding or self.zero_when_skipped):
            hidden = self.body(hidden)
        elif self.computed == 'before':
            embedded = self._embedded(tokens, use_embedding)
            hidden = embedded + self.body(hidden)
        else:
            hidden = self.body(hidden)
            hidden = hidden + self._embedded(tokens, use_embedding)
        # Scaled so that SGD at the adapters' rate stays finite over the iterations.
        return self.head(self.wide(hidden.relu()).tanh() * self.width**-0.5).pow(2).mean()

    def _embedded(self, tokens, use_embedding: bool):
        # The embedding's output goes to the sum as it is: a multiplication would hand its
        # backward a gradient of its own, and no other layer would share it.
        embedded = self.embedding(tokens)
        return embedded if use_embedding else embedded * 0.0


def _everyone(rank: int, iteration: int) -> bool:
    return True


def _not_rank_1_on_odd_iterations(rank: int, iteration: int) -> bool:
    return not (rank == 1 and iteration % 2 == 1)


def _nobody_in_iterations_2_and_3(rank: int, iteration: int) -> bool:
    return iteration not in (2, 3)


USAGE: Dict[str, Callable[[int, int], bool]] = dict(
    all=_everyone, some=_not_rank_1_on_odd_iterations, none=_nobody_in_iterations_2_and_3)
OPTIONS: Dict[str, Dict] = dict(
    plain=dict(), gradient_as_bucket_view=dict(wrapper_kwargs=dict(gradient_as_bucket_view=True)),
    accumulation=dict(accumulate=2))


@dataclass(frozen=True)
class Case:
    registered: str
    computed: str
    usage: str
    option: str

    @property
    def name(self) -> str:
        return f'{self.registered}-{self.computed}-{self.usage}-{self.option}'

    @property
    def own_wrapper_divides_a_gradient_in_use(self) -> bool:
        """Where DDP's in-place division of the sparse gradient reaches the body's: the
        embedding computed after the body, and its gradient the one autograd handed it.
        Not in a window of accumulated gradients: the reducing micro-step adds to the
        gradient of the earlier ones, a tensor of the parameter's own."""
        return self.computed == 'after' and self.option != 'accumulation'

    @property
    def own_wrapper_trains_sparse(self) -> bool:
        """DDP's graph search cannot train a sparse embedding that some rank leaves unused:
        that rank raises ``Expected sparse gradient to be defined`` (pytorch/pytorch#80496)
        while the others wait in the all-reduce, so it is not tried."""
        return self.usage == 'all'


CASES = [Case(registered, computed, usage, option)
         for registered in ('first', 'middle', 'last') for computed in ('before', 'after')
         for usage in USAGE for option in OPTIONS]


def _batch(case: Case, rank: int, iteration: int) -> Dict:
    generator = torch.Generator().manual_seed(1000 * rank + iteration)
    # Distinct tokens: one addend per row of each rank's sparse gradient, so that the sparse
    # sum and the dense one add the same numbers in the same order.
    tokens = torch.randperm(VOCABULARY, generator=generator)[:TOKENS]
    return dict(tokens=tokens, use_embedding=USAGE[case.usage](rank, iteration))


def train(adapter, case: Case, wrapper: str) -> Dict:
    """``wrapper``: 'guarded' (sparse), 'own_sparse' or 'own_dense'. Returns every tensor
    the test compares, or the error's text."""
    collect_earlier_runs()
    option = OPTIONS[case.option]
    accumulate = option.get('accumulate', 1)
    torch.manual_seed(0)
    reference = wrapper == 'own_dense'
    model = adapter.model(SparsePlacementNet(case.registered, case.computed,
                                             sparse=not reference, zero_when_skipped=reference))
    # The own wrapper with the sparse embedding runs DDP's graph search where it goes
    # unused, as a user must.
    mode = 'auto' if wrapper == 'guarded' else (case.usage != 'all' and not reference)
    ddp = adapter.wrap(model, wrapper == 'guarded', mode, **option.get('wrapper_kwargs', {}))
    optimizer = adapter.optimizer(ddp, accumulate, momentum=0.9)
    rank = dist.get_rank()
    try:
        for iteration in range(ITERATIONS):
            adapter.step(ddp, optimizer, _batch(case, rank, iteration), iteration, accumulate)
    except RuntimeError as error:
        return dict(error=f'{type(error).__name__}: {error}')
    finally:
        watchdog = getattr(ddp, 'stall_watchdog', None)
        if watchdog is not None:
            watchdog.stop()
    return dict(weights=dense_copy(dict(ddp.module.named_parameters())),
                buffers=dense_copy(dict(ddp.module.named_buffers())),
                optimizer=dense_copy(adapter.optimizer_state(optimizer)))


def sparse_bucket_places(registered: str, computed: str) -> Tuple[Tuple[int, int], ...]:
    """(index, count) of the sparse embedding's bucket among DDP's buckets, in the first
    backward (DDP's buckets as built) and the second (rebuilt in the order the gradients
    arrived), read by a comm hook on a plain DDP."""
    ddp = nn.parallel.DistributedDataParallel(
        SparsePlacementNet(registered, computed, sparse=True))
    seen = []

    def recording_allreduce(state, bucket):
        seen.append((bucket_index(bucket), bucket_buffer(bucket).is_sparse))
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, recording_allreduce)
    places = []
    for _ in range(2):
        seen.clear()
        ddp(torch.arange(TOKENS)).backward()
        places.append((next(index for index, sparse in seen if sparse), len(seen)))
    return tuple(places)


def train_every_case(rank: int, world_size: int, adapter_name: str,
                     names: Optional[list] = None) -> Dict:
    """Every case three ways, in one launch (the ranks, imports and group are paid once),
    and where each registration puts the embedding's bucket."""
    adapter = load_adapter(adapter_name)
    results = {(case.name, wrapper): train(adapter, case, wrapper)
               for case in CASES if names is None or case.name in names
               for wrapper in ('guarded', 'own_dense') + (
                   ('own_sparse', ) if case.own_wrapper_trains_sparse else ())}
    results['bucket places'] = {(registered, computed): sparse_bucket_places(registered,
                                                                             computed)
                                for registered in ('first', 'middle', 'last')
                                for computed in ('before', 'after')}
    return results
