"""What GuardedDDP's reduction has in common with DDP's, bit for bit, at 3 gloo ranks.

At 2 ranks every path agrees bit for bit: 1/2 is exact and a sum of two addends has one
order. At 3 ranks two things round: averaging (x * (1/3) and x / 3 differ in the last bit
for some x), and the order in which gloo's ring all-reduce adds the ranks' addends, which
depends on where an element falls in the chunks of its bucket, hence on the bucket's length
and layout. The gradients are compared at the initial parameters (no optimizer step), so
that runs differ only in how they reduce.
"""
import inspect
import os

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from tests.dist_utils import run_distributed
from tests.equivalence import rounding_units
from tests.scenarios import reduced_gradients

WORLD_SIZE = 3
pytestmark = pytest.mark.skipif(
    int(os.environ.get('DDP_GUARD_TEST_WORLD_SIZE', WORLD_SIZE)) != WORLD_SIZE
    or os.environ.get('DDP_GUARD_TEST_BACKEND', 'gloo') != 'gloo',
    reason='the roundings compared here need 3 gloo ranks')

#: torch 2.13's DDP(batched_grad_copy=True): one flat division per bucket (reducer.cpp,
#: ``flush_deferred_copies``) instead of a multiplication per gradient.
BATCHED_GRAD_COPY = 'batched_grad_copy' in inspect.signature(
    DistributedDataParallel.__init__).parameters


@pytest.mark.timeout(120)
def test_the_guard_averages_as_ddp_does_by_the_reciprocal():
    """Only rank 0 contributes (the others' gradients are exact zeros), so the all-reduce
    adds zeros and cannot round: what remains is how each path averages."""
    def run(wrapper, **options):
        return dict(wrapper=wrapper, only_rank_0_contributes=True, **options)

    bucket_view = dict(wrapper_kwargs=dict(gradient_as_bucket_view=True), set_to_none=False)
    runs = dict(plain=run('ddp_plain'), graph_search=run('ddp_find_unused'),
                guarded=run('guarded'), plain_bucket_view=run('ddp_plain', **bucket_view),
                guarded_bucket_view=run('guarded', **bucket_view))
    if BATCHED_GRAD_COPY:
        batched = dict(wrapper_kwargs=dict(batched_grad_copy=True))
        runs.update(plain_batched=run('ddp_plain', **batched),
                    guarded_batched=run('guarded', **batched))
    result = run_distributed(reduced_gradients, runs=runs, world_size=WORLD_SIZE)[0]
    for iteration, local in enumerate(result['local']['none']):
        reciprocal = local[0] * (1.0 / WORLD_SIZE)
        divided = local[0] / WORLD_SIZE
        assert bool((reciprocal != divided).any()), 'the two averages must be told apart'

        def reduced(label):
            return result[label]['grads'][iteration]

        # DDP without a comm hook: at::mul_out(bucket_view, grad, 1. / div_factor_).
        assert torch.equal(reduced('plain'), reciprocal)
        assert torch.equal(reduced('graph_search'), reciprocal)
        assert torch.equal(reduced('guarded'), reciprocal)
        # A gradient that already is its bucket's view (gradient_as_bucket_view, zeroed in
        # place: from the second iteration on) DDP divides, bucket_view.div_(div_factor_);
        # a comm hook cannot tell such a gradient from a copied one, and the guard's
        # multiplies.
        assert torch.equal(reduced('plain_bucket_view'),
                           reciprocal if iteration == 0 else divided)
        assert torch.equal(reduced('guarded_bucket_view'), reciprocal)
        if BATCHED_GRAD_COPY:
            assert torch.equal(reduced('plain_batched'), divided)
            assert torch.equal(reduced('guarded_batched'), reciprocal)


@pytest.mark.timeout(120)
def test_nothing_unused_differs_from_plain_ddp_only_in_the_summation_order_of_the_last_bucket():
    """The counts lengthen DDP's last bucket: some of its elements fall into another chunk
    of gloo's ring and are summed in another order. Every other bucket is bit-identical.
    Several buckets: a 1 KB cap (torch < 2.13 keeps its 1 MB first bucket after the
    rebuild, so the toy has one bucket there)."""
    options = dict(wrapper_kwargs=dict(bucket_cap_mb=1e-3))
    result = run_distributed(
        reduced_gradients, world_size=WORLD_SIZE, steps=4,
        runs=dict(plain=dict(wrapper='ddp_plain', **options),
                  guarded=dict(wrapper='guarded', **options)))[0]
    plain, guarded = result['plain'], result['guarded']
    units = rounding_units(guarded['grads'], plain['grads'], result['local']['none'],
                           WORLD_SIZE)
    assert units <= 2 * (WORLD_SIZE - 1), units
    last_bucket = plain['last_bucket']
    assert guarded['last_bucket'] is None or torch.equal(guarded['last_bucket'], last_bucket)
    if last_bucket is not None:
        # From the second iteration on: DDP's rebuilt buckets, which the mask describes.
        for reduced, expected in zip(guarded['grads'][1:], plain['grads'][1:]):
            assert torch.equal(reduced[~last_bucket], expected[~last_bucket])


@pytest.mark.timeout(120)
def test_unused_parameters_reduce_as_the_graph_search_within_ddps_own_rounding():
    """DDP's fast path and its graph search, on a model that uses every parameter, reduce
    the same addends in other orders (the graph search keeps DDP's first buckets, the fast
    path rebuilds them in the order gradients arrive): that measured difference bounds the
    guard's against the graph search where parameters go unused."""
    patterns = ('dead_layer', 'rank_dependent')
    runs = dict(plain=dict(wrapper='ddp_plain'), graph_search=dict(wrapper='ddp_find_unused'))
    for pattern in patterns:
        runs[f'guarded_{pattern}'] = dict(wrapper='guarded', pattern=pattern)
        runs[f'graph_search_{pattern}'] = dict(wrapper='ddp_find_unused', pattern=pattern)
    result = run_distributed(reduced_gradients, runs=runs, world_size=WORLD_SIZE, steps=6)[0]
    ddp_own = rounding_units(result['plain']['grads'], result['graph_search']['grads'],
                             result['local']['none'], WORLD_SIZE)
    assert 0 < ddp_own <= 2 * (WORLD_SIZE - 1), ddp_own
    for pattern in patterns:
        units = rounding_units(result[f'guarded_{pattern}']['grads'],
                               result[f'graph_search_{pattern}']['grads'],
                               result['local'][pattern], WORLD_SIZE)
        assert units <= ddp_own, (pattern, units, ddp_own)
