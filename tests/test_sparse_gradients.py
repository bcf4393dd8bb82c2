"""Sparse gradients (``nn.Embedding(sparse=True)``) train under the guard as the true
averages of the ranks' gradients, in every place of DDP's bucket order (tests/
sparse_placements.py: registered first, in the middle or last; computed before or after the
layer it is added to; used by every rank, by some, by none in some iterations; plain,
``gradient_as_bucket_view`` and gradient accumulation), every rank's weights, buffers and
optimizer state compared bit for bit, in one 2-rank gloo launch per adapter installed.

Against what: the framework's own wrapper with a dense embedding (the independent
computation), always; the framework's own wrapper with the sparse embedding where it trains
the true averages. Where it does not (the embedding computed after the layer it is added to:
DDP divides the sparse gradient in place while autograd still passes it on), the test shows
that it differs, so that a torch that fixes it is noticed. Where some rank leaves the
embedding unused, DDP's graph search cannot train it at all (one rank raises, the other
waits), and only the independent computation is compared.

Why the DDP contract's sparse cases did not see it: their embedding is the model's input,
with nothing beside it, so autograd reaches it last and hands its gradient to no other
layer; in-place divisions, DDP's or the guard's, then touch nothing still in use.
"""
import os

import pytest
import torch

from mmdet3d_ddp_guard.environment.frameworks import installed_frameworks
from tests.dist_utils import run_distributed
from tests.sparse_placements import CASES, train_every_case
from tests.test_ddp_contract import _assert_same

pytestmark = pytest.mark.timeout(400)

#: The legs of the version matrix test one adapter here (tools/version_matrix.sh sets
#: DDP_GUARD_SPARSE_ADAPTERS: MMEngine's in the torch legs, mmcv's in the openmmlab1 leg):
#: the sparse handling is the guard's, the same under every adapter, and each adapter's
#: wiring runs in the suite (mmcv's in the openmmlab1 leg).
ADAPTERS = [name for name, framework in (('mmengine', 'mmengine'), ('mmcv', 'mmcv-full'),
                                         ('pytorch', 'torch'))
            if framework in installed_frameworks()
            and name in (os.environ.get('DDP_GUARD_SPARSE_ADAPTERS') or name).split(',')]
COMPARED = ('weights', 'buffers', 'optimizer')


@pytest.fixture(scope='module', params=ADAPTERS)
def trained(request):
    return request.param, run_distributed(train_every_case, request.param, timeout=300)


def _same(a, b) -> bool:
    try:
        for kind in COMPARED:
            _assert_same(a[kind], b[kind], kind)
    except AssertionError:
        return False
    return True


def test_the_cases_put_the_embedding_s_bucket_first_in_the_middle_and_last(trained):
    """DDP builds one dense bucket beside the sparse one for its first backward (its fast
    path rebuilds them anyway), then rebuilds them in the order the gradients arrived, with
    1 MiB in the first: registered first, the embedding's bucket is the last of the first
    backward (the one that carries the guard's counts); registered in the middle, with the
    wide layers after it, it is the middle one of three once rebuilt; registered last, the
    first."""
    adapter, results = trained
    for result in results:
        for (registered, _), places in result['bucket places'].items():
            (built, built_count), (rebuilt, rebuilt_count) = places
            if registered == 'first':
                assert built == built_count - 1 and built_count > 1, places
            elif registered == 'middle':
                assert 0 < rebuilt < rebuilt_count - 1, places
            else:
                assert built == rebuilt == 0, places


@pytest.mark.parametrize('case', CASES, ids=[case.name for case in CASES])
def test_sparse_gradients_train_as_the_true_averages(trained, case):
    adapter, results = trained
    for rank, result in enumerate(results):
        guarded, own, reference = (result.get((case.name, wrapper))
                                   for wrapper in ('guarded', 'own_sparse', 'own_dense'))
        where = f'{adapter} {case.name} rank {rank}'
        assert 'error' not in guarded, f'{where}: guarded: {guarded["error"]}'
        assert 'error' not in reference, f'{where}: reference: {reference["error"]}'
        for kind in COMPARED:
            _assert_same(guarded[kind], reference[kind], f'{where} {kind}')
        if not case.own_wrapper_trains_sparse:
            continue
        assert 'error' not in own, f'{where}: own wrapper: {own["error"]}'
        if case.own_wrapper_divides_a_gradient_in_use:
            assert not _same(own, reference), (
                f'{where}: the own wrapper trained the true averages: has torch stopped '
                'dividing sparse gradients in place? Compare with it bit for bit here too.')
        else:
            for kind in COMPARED:
                _assert_same(guarded[kind], own[kind], f'{where} {kind} (own wrapper)')
    for rank, result in enumerate(results[1:], 1):
        _assert_same(result[(case.name, 'guarded')]['weights'],
                     results[0][(case.name, 'guarded')]['weights'],
                     f'{adapter} {case.name} rank {rank} weights against rank 0')


@pytest.mark.skipif('mmengine' not in ADAPTERS, reason='needs MMEngine')
@pytest.mark.parametrize('find_unused_parameters', ['auto', False, True])
def test_the_build_says_that_sparse_gradients_may_train_otherwise_than_ddp(
        single_rank_group, tmp_path, find_unused_parameters):
    """A change of training is said at build: in the modes that average through the guard's
    comm hook, not under DDP's graph search (which trains as the own wrapper)."""
    from mmengine.logging import MMLogger

    from mmdet3d_ddp_guard import GuardedDDP
    from tests.ddp_contract_mmengine import ContractModel
    from tests.sparse_placements import SparsePlacementNet

    log_file = tmp_path / 'build.log'
    # The newest logger is the 'current' one GuardedDDP logs to.
    MMLogger.get_instance(f'sparse_{tmp_path.name}', log_file=str(log_file))
    wrapper = GuardedDDP(ContractModel(SparsePlacementNet('first', 'after', sparse=True)),
                         find_unused_parameters=find_unused_parameters, stall_timeout=None)
    del wrapper
    said = 'net.embedding.weight receive(s) sparse gradients' in log_file.read_text()
    assert said == (find_unused_parameters is not True)
