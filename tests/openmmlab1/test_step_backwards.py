"""Under mmcv 1.x the guard trains every backward shape as mmcv's own DDP does, bit for bit on
2 gloo ranks: each rank's weights and SGD momenta after 4 iterations of a real mmcv
``IterBasedRunner`` are compared with plain mmcv DDP's (nothing unused) or DDP's graph
search's (rank 1 skips a branch), trained in the same process group
(tests/openmmlab1/step_backward_shapes.py has the shapes and why each one matters).

One launch trains all of them, one after the other: the ranks, imports and process group
are paid once (about 40 s on a quiet 2-core machine for 44 trainings)."""
import pytest
import torch

from tests.dist_utils import run_distributed

pytestmark = pytest.mark.timeout(400)

CHECKPOINTED = ('checkpoint_near_loss', 'with_cp_block_last')
#: The graph search cannot run the checkpointed shapes, so they are trained with every
#: parameter used only.
RANK_DEPENDENT = ('two_backwards', 'probe_on_rank_0', 'backward_styles', 'gradient_cumulative',
                  'raises_and_skipped', 'fp16_optimizer_hook', 'ema_copies_the_wrapper')
#: mmcv's own DDP trains a trunk frozen after warm-up with its graph search only: every mode
#: of the guard, the strict one included (a frozen parameter is not unused), is held to it.
FROZEN = 'frozen_after_warm_up'
FROZEN_RUNS = [(FROZEN, wrapper, False) for wrapper in ('graph_search', 'auto', 'strict')]
NOTHING_UNUSED = CHECKPOINTED + RANK_DEPENDENT
TRAINS_AS = {
    False: ('plain', ('auto', 'strict')),
    True: ('graph_search', ('auto', 'guarded_true')),
}
RUNS = (
    [(shape, wrapper, False) for shape in NOTHING_UNUSED
     for wrapper in ('plain', 'auto', 'strict', 'guarded_true')
     if not (shape in CHECKPOINTED and wrapper == 'guarded_true')]
    + [(shape, wrapper, True) for shape in RANK_DEPENDENT
       for wrapper in ('graph_search', 'auto', 'guarded_true')]
    + FROZEN_RUNS
    # Last, since they end in an error (the same on both ranks).
    + [(shape, wrapper, False) for shape in CHECKPOINTED
       for wrapper in ('graph_search', 'guarded_true')]
    + [('raises_after_reaching', wrapper, False) for wrapper in ('plain', 'auto')])


def _train_every_wrapper(rank, world_size, runs, work_dir):
    from tests.openmmlab1.step_backward_shapes import train_every_wrapper
    return train_every_wrapper(rank, world_size, runs, work_dir)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    return run_distributed(_train_every_wrapper, RUNS,
                           str(tmp_path_factory.mktemp('step_backwards')), timeout=300)


def _assert_equal(result, expected, where, buffers=True):
    """Weights and momenta; buffers (each rank's own) only against the same rank's."""
    assert 'error' not in result, (where, result.get('error'))
    assert result.keys() == expected.keys(), where
    for kind in [k for k in ('weights', 'buffers', 'ema', 'saved')
                 if k in expected and (buffers or k == 'weights')]:
        assert result[kind].keys() == expected[kind].keys()
        for name, value in result[kind].items():
            assert torch.equal(value, expected[kind][name]), (where, name)
    for index, (momentum, other) in enumerate(zip(result['momenta'], expected['momenta'])):
        assert (momentum is None) == (other is None), (where, index)
        assert momentum is None or torch.equal(momentum, other), (where, index)


@pytest.mark.parametrize('shape,unused', [(shape, False) for shape in NOTHING_UNUSED]
                         + [(shape, True) for shape in RANK_DEPENDENT])
def test_every_mode_trains_the_shape_as_mmcv_s_own_ddp(trained, shape, unused):
    reference, guarded = TRAINS_AS[unused]
    expected = [trained[rank][(shape, reference, unused)] for rank in (0, 1)]
    assert 'error' not in expected[0], expected[0]['error']
    _assert_equal(expected[1], expected[0], f'{reference} rank 1', buffers=False)
    for wrapper in guarded:
        if (shape, wrapper, unused) not in RUNS:
            continue
        for rank in (0, 1):
            _assert_equal(trained[rank][(shape, wrapper, unused)], expected[rank],
                          f'{wrapper} rank {rank} vs {reference}')
            _assert_equal(trained[rank][(shape, wrapper, unused)], expected[0],
                          f'{wrapper} rank {rank} vs {reference} rank 0', buffers=False)


def test_a_trunk_frozen_after_warm_up_trains_in_every_mode_as_the_graph_search(trained):
    """Parameters that stop requiring grad after the wrapper was built are neither
    completed with a gradient nor a failure, in the strict mode too; unfrozen, they train
    again."""
    for rank in (0, 1):
        expected = trained[rank][(FROZEN, 'graph_search', False)]
        for wrapper in ('auto', 'strict'):
            _assert_equal(trained[rank][(FROZEN, wrapper, False)], expected,
                          f'{wrapper} rank {rank} vs the graph search')


def test_an_ema_copy_of_the_guarded_wrapper_is_a_guarded_wrapper_without_a_stall_guard(
        trained):
    for rank in (0, 1):
        for unused, wrapper in ((False, 'auto'), (True, 'auto'), (False, 'plain')):
            result = trained[rank][('ema_copies_the_wrapper', wrapper, unused)]
            classes = ('GuardedMMDistributedDataParallel' if wrapper == 'auto'
                       else 'CPUCompatibleMMDistributedDataParallel')
            assert result['copies'] == [classes] * 2, result['copies']
            assert result['copies_watchdogs'] == [False, False]


@pytest.mark.parametrize('shape', CHECKPOINTED)
def test_checkpointed_shapes_fail_under_the_graph_search_guarded_or_not(trained, shape):
    """``find_unused_parameters = True`` is DDP's graph search, guarded or not: it cannot
    run reentrant checkpointing (its search marks the block's parameters unused, then the
    nested backward reaches them), and the guard changes nothing about that."""
    for wrapper in ('graph_search', 'guarded_true'):
        for rank in (0, 1):
            assert 'mark a variable ready only once' in trained[rank][
                (shape, wrapper, False)].get('error', ''), (wrapper, rank)


def test_a_backward_that_raised_after_reaching_parameters_is_named_at_the_next_step(trained):
    """Plain mmcv DDP cannot go on after such a step either; the guard says why."""
    for rank in (0, 1):
        plain = trained[rank][('raises_after_reaching', 'plain', False)]['error']
        assert 'Expected to have finished reduction in the prior iteration' in plain
        guarded = trained[rank][('raises_after_reaching', 'auto', False)]['error']
        assert guarded.startswith(
            "RuntimeError: mmdet3d_ddp_guard: the previous step's backward raised after "
            'reaching parameters'), guarded
        assert 'SkipOnErrorOptimizerHook' in guarded
