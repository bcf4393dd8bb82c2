"""GuardedDDP and UnusedParamsHook under MMEngine's other ways of running the train step:
``FlexibleRunner`` with ``DDPStrategy(model_wrapper=GuardedDDP)``, and ``Runner`` with
``compile=`` (torch.compile of the train step). 2 gloo ranks, the toy detector whose branch
is unused where iteration + rank is odd; each run is compared with the eager ``Runner`` under
DDP's graph search (``find_unused_parameters=True``)."""
import pytest
import torch

from tests.toys import ToyDetector
from tests.dist_utils import run_distributed
from tests.equivalence import assert_hook_matches_truth
from tests.scenarios import train_toy_runner

PATTERN = 'rank_dependent'
GUARDED = dict(type='GuardedDDP')


@pytest.fixture(scope='module')
def same_start(tmp_path_factory):
    """Every run loads these weights: a seed alone does not make FlexibleRunner, which
    builds the model later than Runner, start from Runner's weights."""
    path = str(tmp_path_factory.mktemp('initial') / 'toy.pth')
    torch.manual_seed(0)
    torch.save(dict(state_dict=ToyDetector(PATTERN).state_dict()), path)
    return dict(load_from=path)


@pytest.fixture(scope='module')
def graph_search_run(tmp_path_factory, same_start):
    work_dir = str(tmp_path_factory.mktemp('graph_search'))
    return run_distributed(train_toy_runner, work_dir, PATTERN,
                           dict(type='CPUCompatibleMMDDP', find_unused_parameters=True),
                           **same_start)


def _assert_guarded_like_graph_search(results, reference):
    # Rank 0 writes the file (another rank may read it before rank 0's last line).
    assert_hook_matches_truth(results[0])
    for rank, (result, expected) in enumerate(zip(results, reference)):
        assert result['decision'] == 'complete'
        assert result['record_is_wrappers']
        assert result['statistics'] == expected['statistics']
        for name, value in expected['params'].items():
            assert torch.allclose(result['params'][name], value, atol=1e-6, rtol=0), \
                f'rank {rank}: {name} differs from the find_unused_parameters=True run'


@pytest.mark.timeout(300)
def test_flexible_runner_with_ddp_strategy(tmp_path, same_start, graph_search_run):
    # The config's top-level line is read from FlexibleRunner too (MMEngine drops it there
    # as well when a model wrapper is configured).
    results = run_distributed(train_toy_runner, str(tmp_path), PATTERN, GUARDED,
                              flexible=True, find_unused_parameters='auto', **same_start)
    assert results[0]['compiled_graphs'] == 0
    assert results[0]['decision_source'] == 'config top-level find_unused_parameters'
    _assert_guarded_like_graph_search(results, graph_search_run)


@pytest.mark.timeout(400)
@pytest.mark.parametrize('backend', ['aot_eager', 'inductor'])
def test_runner_compile(tmp_path, same_start, graph_search_run, backend):
    results = run_distributed(train_toy_runner, str(tmp_path), PATTERN, GUARDED,
                              compile=dict(backend=backend), timeout=300, **same_start)
    assert all(result['compiled_graphs'] > 0 for result in results)
    _assert_guarded_like_graph_search(results, graph_search_run)
