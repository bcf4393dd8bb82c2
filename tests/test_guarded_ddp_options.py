"""What the user writes wins, and bad settings fail clearly."""
import pytest
import torch

from mmdet3d_ddp_guard import GuardedDDP
from mmdet3d_ddp_guard.environment.framework_table import MMENGINE_LINES
from mmdet3d_ddp_guard.messages.mode_request import not_given, read_request
from tests.toys import ToyDetector
from tests.dist_utils import DistributedRunError, run_distributed
from tests.scenarios import strict_stop_message, train_toy


@pytest.mark.timeout(120)
def test_plain_ddp_really_fails_on_the_toy_model():
    """The baseline the project exists for: DDP's own error on a skipped branch."""
    with pytest.raises(DistributedRunError, match='Expected to have finished reduction'):
        run_distributed(train_toy, 'ddp_plain', 'skip_odd', 'sgd', steps=3, timeout=100)


@pytest.mark.timeout(120)
def test_forced_false_stops_with_a_clear_error_naming_the_parameters():
    with pytest.raises(DistributedRunError) as raised:
        run_distributed(train_toy, 'guarded', 'skip_odd', 'sgd', steps=3, timeout=100,
                        wrapper_kwargs=dict(find_unused_parameters=False))
    text = str(raised.value)
    assert 'UnusedParametersError' in text
    assert 'RuntimeError: Expected to have finished reduction' not in text
    # The dead layer is unused from the first iteration on.
    assert 'in iteration 0 on rank(s) 0, 1' in text
    for expected in ('dead.weight', '(16, 16)', 'dead.bias', '(16,)', 'Linear'):
        assert expected in text
    # The fix in MMEngine's words (tests/test_fix_lines.py reads both frameworks' whole).
    assert "in your config:\n    model_wrapper_cfg = dict(type='GuardedDDP', " \
        "find_unused_parameters='auto')\nand delete any top-level" in text


@pytest.mark.timeout(120)
def test_forced_false_stops_every_rank_with_the_same_named_error():
    """Ranks disagree: rank 1 skips the branch in iteration 0, rank 0 runs it. Every rank,
    not just the one that skipped, stops by name (no raw gloo "Connection reset by peer",
    no wait until the collective timeout), and the error says which rank left what."""
    messages = run_distributed(strict_stop_message, 'rank_dependent', timeout=100)
    assert messages[0] == messages[1]
    text = messages[0]
    assert text.startswith('UnusedParametersError'), text
    assert 'in iteration 0 on rank(s) 0, 1' in text
    rank_0, rank_1 = text.split('rank 1: ')
    assert 'dead.weight' in rank_0 and 'branch.weight' not in rank_0.split('rank 0: ')[1]
    assert 'branch.weight' in rank_1 and 'dead.weight' in rank_1
    assert 'GuardedDDP(find_unused_parameters=False) in Python' in text


@pytest.mark.timeout(120)
def test_static_graph_with_a_changing_set_stops_clearly():
    with pytest.raises(DistributedRunError) as raised:
        run_distributed(train_toy, 'guarded', 'skip_odd', 'sgd', steps=3, timeout=100,
                        wrapper_kwargs=dict(static_graph=True))
    text = str(raised.value)
    assert 'StaticGraphChangedError' in text and 'iteration 1' in text
    assert 'branch.weight' in text and 'remove static_graph=True' in text


@pytest.mark.timeout(200)
def test_explicit_settings_are_honoured_and_train():
    for kwargs, mode, pattern in ((dict(find_unused_parameters=True), 'find_unused',
                                   'rank_dependent'),
                                  (dict(static_graph=True), 'static_graph', 'dead_layer'),
                                  (dict(find_unused_parameters=False), 'strict', 'none')):
        results = run_distributed(train_toy, 'guarded', pattern, 'sgd', steps=3,
                                  wrapper_kwargs=kwargs)
        assert results[0]['decision'] == mode
        assert results[0]['usage'] == results[0]['expected']


def test_read_request_reads_both_places_and_refuses_contradictions():
    lines = dict(lines=MMENGINE_LINES)
    assert read_request(not_given(), **lines) == ('auto', 'default')
    assert read_request(not_given(), True, **lines) == (True, 'config top-level '
                                                              'find_unused_parameters')
    assert read_request(False, not_given(), **lines) == (False, 'model_wrapper_cfg')
    assert read_request('auto', 'auto', **lines)[0] == 'auto'
    with pytest.raises(ValueError, match='sets find_unused_parameters twice'):
        read_request(False, True, **lines)


@pytest.mark.parametrize('kwargs, error, words', [
    (dict(find_unused_parameters='yes'), ValueError, "find_unused_parameters='yes'"),
    (dict(find_unused_parameters=1), TypeError, "'auto', True or False"),
    (dict(find_unused_parameters=None), TypeError, 'find_unused_parameters'),
    (dict(static_graph='true'), TypeError, 'static_graph must be True or False'),
])
def test_bad_settings_fail_at_build_naming_the_option(single_rank_group, kwargs, error,
                                                     words):
    with pytest.raises(error, match=words.replace('(', r'\(').replace(')', r'\)')):
        GuardedDDP(ToyDetector(), **kwargs)


def test_cpu_module_drops_device_ids_that_runner_passes(single_rank_group):
    wrapped = GuardedDDP(ToyDetector(), device_ids=[0])
    assert wrapped.device_ids is None
    losses = wrapped.train_step(
        dict(inputs=torch.randn(4, 8), targets=torch.randn(4)),
        __import__('mmengine.optim', fromlist=['OptimWrapper']).OptimWrapper(
            torch.optim.SGD(wrapped.parameters(), lr=0.1)))
    assert set(losses) >= {'loss_box', 'loss'}


def test_a_comm_hook_of_ones_own_is_taken_in_every_mode_once_as_by_ddp(single_rank_group):
    """The training itself: tests/test_comm_hooks.py."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    for mode in ('auto', False, True):
        wrapped = GuardedDDP(torch.nn.Linear(2, 2), find_unused_parameters=mode)
        wrapped.register_comm_hook(None, allreduce_hook)
        with pytest.raises(RuntimeError, match='^register_comm_hook or '
                                               'register_builtin_comm_hook can only be called '
                                               'once.$'):
            wrapped.register_comm_hook(None, allreduce_hook)
    # DDP's own check of the hook, in the guard's modes too.
    with pytest.raises(TypeError, match='Communication hook must be callable'):
        GuardedDDP(torch.nn.Linear(2, 2)).register_comm_hook(None, 'not a hook')
