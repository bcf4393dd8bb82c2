"""Graph shapes that real detectors have and that are not plain "unused" layers: frozen
parameters, a weight shared by two paths of which one is skipped, and an output detached
before the loss on some ranks. GuardedDDP must train them exactly as DDP's graph search
does (2 gloo ranks)."""
import pytest
import torch

from tests.toys import ToyDetector
from tests.dist_utils import run_distributed
from tests.equivalence import assert_trains_like_graph_search
from tests.scenarios import train_guarded_and_reference


@pytest.mark.timeout(300)
@pytest.mark.parametrize('optimizer', ['sgd', 'adamw'])
def test_frozen_shared_and_detached_train_like_the_graph_search(optimizer):
    results = run_distributed(train_guarded_and_reference, pattern='frozen_shared_detached',
                              optimizer=optimizer)
    assert_trains_like_graph_search(results)
    guarded = results[0]['guarded']
    # Frozen parameters are neither trained nor reported: autograd never reaches them and
    # DDP does not reduce them, so they cannot break DDP.
    assert not any('frozen' in name for usage in guarded['usage'] for ranks in usage
                   for name in ranks)
    torch.manual_seed(0)  # as train_toy builds the model
    initial = ToyDetector('frozen_shared_detached').frozen.weight
    assert torch.equal(guarded['params']['frozen.weight'], initial)
    # The shared weight is used in every iteration (one of its paths always runs), and the
    # detached aux head is unused on rank 1 only.
    assert not any('shared' in name for usage in guarded['usage'] for ranks in usage
                   for name in ranks)
    assert all('aux.weight' in usage[1] and 'aux.weight' not in usage[0]
               for usage in guarded['usage'])
