"""The plain adapter's modes, as the other adapters': ``find_unused_parameters=True`` is
DDP's graph search as written, False is strict (every rank stops with the same error naming
the parameters and the fix in a plain loop's words), ``static_graph=True`` stops with a
clear error where the used set changes; on torch 1.9, whose ``join()`` the guard's counts
cannot ride, a rank that joins stops with the fix, which trains; and what the decision logs."""
import pytest
import torch

from mmdet3d_ddp_guard.environment.ddp_compat import JOIN_THROUGH_COMM_HOOK, STATIC_GRAPH_ARGUMENT
from mmdet3d_ddp_guard.environment.framework_table import PYTORCH_LINES
from mmdet3d_ddp_guard.messages.guard_errors import join_refused
from mmdet3d_ddp_guard.pytorch import GuardedDDP
from tests.dist_utils import run_distributed, run_until_exit
from tests.equivalence import assert_state_equal
from tests.pytorch.loops import Run, _batches_of, guarded, train_side_by_side

pytestmark = pytest.mark.timeout(300)


def test_find_unused_parameters_true_is_the_graph_search_as_written():
    results = run_distributed(train_side_by_side,
                              guarded_kwargs=dict(find_unused_parameters=True))
    for rank, result in enumerate(results):
        assert result['decision'] == 'find_unused'
        for key in ('params', 'buffers', 'optimizer_state', 'none_grads'):
            assert_state_equal(result['guarded'][key], result['reference'][key],
                               f'rank {rank} {key}')


def _stop_of(rank: int, world_size: int, **kwargs):
    """The error each rank stops with, and the step it stopped at."""
    run = Run(guarded, **kwargs)
    for step, batches in enumerate(_batches_of(rank, 'plain', 6, 1)):
        try:
            run.step(rank, batches)
        except RuntimeError as error:  # the guard's errors, and gloo's
            run.model.stall_watchdog.stop()
            return type(error).__name__, str(error), step
    return None


def test_strict_stops_every_rank_with_the_same_error_in_a_plain_loop_s_words():
    stops = run_distributed(_stop_of, find_unused_parameters=False)
    names, texts, steps = zip(*stops)
    assert names == ('UnusedParametersError', ) * 2 and texts[0] == texts[1]
    # Iteration 1 left rank 1's scale-2 head unused; every rank stops at the next forward.
    assert steps == (2, 2)
    text = texts[0]
    assert text.startswith('GuardedDDP: parameters received no gradient in iteration 1 on '
                           'rank(s) 1, but find_unused_parameters=False was requested '
                           "(GuardedDDP(find_unused_parameters=False) in Python).")
    assert 'heads.2 (Conv2d)' in text or 'heads.2.weight' in text
    assert "Fix: let the guard handle them, in your code:\n" \
           "    GuardedDDP(model, find_unused_parameters='auto')\n" in text
    assert 'config' not in text


def test_static_graph_stops_the_rank_whose_used_set_changed_with_the_fix():
    if not STATIC_GRAPH_ARGUMENT:
        pytest.skip(f"torch {torch.__version__}'s DDP takes no static_graph, nor GuardedDDP")
    stops = run_distributed(_stop_of, static_graph=True)
    # Rank 1 left its scale-2 head unused in iteration 1; rank 0, waiting for its bucket,
    # ends when rank 1's process group goes.
    name, text, step = stops[1]
    assert name == 'StaticGraphChangedError' and step == 1
    assert "remove static_graph=True from GuardedDDP(...) and let it choose: " \
           "GuardedDDP(model)" in text and 'config' not in text, text
    assert stops[0] is not None and stops[0][2] == 1


def _one_strict_step(rank: int, world_size: int) -> None:
    run = Run(guarded, find_unused_parameters=False)
    run.step(rank, _batches_of(rank, 'plain', 1, 1)[0])
    run.model.stall_watchdog.stop()


def test_the_decision_is_logged_in_a_plain_loop_s_words():
    ranks = run_until_exit(_one_strict_step, timeout=60)
    assert "[mmdet3d_ddp_guard rank 0] INFO: GuardedDDP decision (at build): mode='strict' " \
           "(requested find_unused_parameters=False, from GuardedDDP(" \
           "find_unused_parameters=False) in Python)" in ranks[0].output
    # The other ranks log their errors only, as MMEngine's print_log shows them.
    assert '[mmdet3d_ddp_guard rank 1]' not in ranks[1].output


@pytest.mark.parametrize('value, error', [('yes', ValueError), (1, TypeError)])
def test_a_bad_mode_names_the_argument_and_the_modes(value, error):
    with pytest.raises(error) as raised:
        guarded(torch.nn.Linear(1, 1), find_unused_parameters=value)
    assert 'find_unused_parameters' in str(raised.value)
    assert "'auto'" in str(raised.value)


def test_an_argument_ddp_does_not_take_is_refused_as_ddp_refuses_it():
    with pytest.raises(TypeError, match='bucket_cap'):
        guarded(torch.nn.Linear(1, 1), bucket_cap=25)


def _join_with_uneven_inputs(rank: int, world_size: int, **kwargs):
    """Rank 0 joins after one step, rank 1 takes three; the error each rank stops with."""
    torch.manual_seed(0)
    model = GuardedDDP(torch.nn.Linear(2, 3), **kwargs)
    try:
        with model.join():
            for _ in range(1 if rank == 0 else 3):
                model(torch.rand(4, 2)).sum().backward()
    except RuntimeError as error:
        return str(error)
    finally:
        model.stall_watchdog.stop()
    return None


@pytest.mark.skipif(JOIN_THROUGH_COMM_HOOK, reason=f'torch {torch.__version__} joins under the '
                    'guard (tests/test_join_under_the_guard.py)')
@pytest.mark.parametrize('mode', ['auto', False])
def test_a_rank_that_joins_on_torch_1_9_stops_with_the_fix(mode):
    refused = join_refused(torch.__version__, PYTORCH_LINES)
    assert 'GuardedDDP(model, find_unused_parameters=True)' in refused
    joined, waiting = run_distributed(_join_with_uneven_inputs, find_unused_parameters=mode)
    # The rank still training waits in its all-reduce until the joined one's group goes.
    assert joined == refused and waiting is not None


def test_the_fix_for_join_on_torch_1_9_trains_under_join():
    assert run_distributed(_join_with_uneven_inputs, find_unused_parameters=True) == [None] * 2
