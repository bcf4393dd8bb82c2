"""The stall guard's judgement of positions and its option (tests/test_layout.py checks that
it imports no framework)."""

import pytest
import torch.nn as nn

from mmdet3d_ddp_guard import GuardedDDP
from mmdet3d_ddp_guard.stall_guard import diagnose
from mmdet3d_ddp_guard.environment.framework_table import MMENGINE_LINES

BUCKET = ('ddp', 0)
SYNC_BN = ('refiner.1', 'PluginSyncBN2d', 'forward', 'projects/plugin/norm.py', 14)


def _entry(index, issuer, op='all_reduce', numel=100, iteration=3, nth=1, digest=None):
    return [index, op, numel, iteration, nth, issuer, digest]


def _at(phase, entries=(), iteration=3, call=None, error=None):
    entries = [list(entry) for entry in entries]
    issued = entries[-1][0] + 1 if entries else 0
    return dict(iteration=iteration, phase=phase, call=call, error=error, moves=0, pid=0,
                groups={'world': dict(issued=issued, entries=entries)})


SAME = [_entry(0, BUCKET, iteration=2), _entry(1, BUCKET)]
IN_ALL_GATHER = dict(op='all_gather', where='projects/plugin/norm.py:14 in forward')


@pytest.mark.parametrize('blocking', [True, False])
def test_ranks_whose_collectives_differ_cannot_meet_on_any_backend(blocking):
    positions = {0: _at('settling', SAME),
                 1: _at('forward', SAME[:1] + [_entry(1, SYNC_BN, 'all_gather', 32)],
                        call=IN_ALL_GATHER)}
    diagnosis = diagnose(positions, 180, blocking, MMENGINE_LINES)
    assert diagnosis.stop
    assert ("The ranks cannot meet: their 2nd collective differs: rank 0: DDP's gradient "
            'bucket 0 of iteration 3 (100 elements); rank 1: all_gather in refiner.1 '
            '(PluginSyncBN2d).forward, projects/plugin/norm.py:14, its 1st collective of '
            'iteration 3 (32 elements).') in diagnosis.text
    assert "norm_cfg=dict(type='BN')" in diagnosis.text


def test_a_rank_that_left_the_iteration_without_a_collective_cannot_meet():
    positions = {0: _at('forward', SAME[:1], iteration=4),
                 1: _at('hooks', SAME[:1] + [_entry(1, SYNC_BN, nth=2)],
                        call=dict(op='all_reduce', where='x.py:1 in f'))}
    diagnosis = diagnose(positions, 180, blocking=False, lines=MMENGINE_LINES)
    assert diagnosis.stop
    assert 'rank 0: none (it went on to iteration 4 without it)' in diagnosis.text


@pytest.mark.parametrize('blocking', [True, False])
def test_a_rank_behind_in_the_same_iteration_may_still_come(blocking):
    """The others issued the 2nd collective; rank 0 has not yet, in the same iteration."""
    positions = {0: _at('forward', SAME[:1]), 1: _at('settling', SAME), 2: _at('backward', SAME)}
    diagnosis = diagnose(positions, 180, blocking, MMENGINE_LINES)
    assert not diagnosis.stop
    if blocking:
        assert 'ranks 1 and 2 wait for rank 0, busy outside collectives: a slow phase, ' \
            'not a hang' in diagnosis.text
    else:
        assert "a possible hang, left to the process group's own timeout" in diagnosis.text


def test_every_rank_in_the_same_collective_is_slow_not_hung():
    positions = {0: _at('backward', SAME), 1: _at('settling', SAME)}
    diagnosis = diagnose(positions, 180, blocking=True, lines=MMENGINE_LINES)
    assert not diagnosis.stop
    assert 'Every rank waits in the same collective: slow, not a hang' in diagnosis.text


def test_where_collectives_block_ranks_that_all_wait_at_different_counts_are_stuck():
    """Rank 1 waits in DDP's backward, whose buckets the record has not (the graph search
    mode), while rank 0 waits in a collective rank 1 never issued: none can move on gloo;
    on NCCL the same hosts say nothing."""
    positions = {0: _at('forward', SAME[:1] + [_entry(1, SYNC_BN, 'all_gather')],
                        call=IN_ALL_GATHER),
                 1: _at('backward', SAME[:1])}
    blocked = diagnose(positions, 180, blocking=True, lines=MMENGINE_LINES)
    assert blocked.stop
    assert ('every rank waits in communication, and they have issued different numbers of '
            'collectives (rank 1 after 1; rank 0 after 2)') in blocked.text
    assert not diagnose(positions, 180, blocking=False, lines=MMENGINE_LINES).stop


def test_waiting_for_a_busy_rank_is_not_a_hang():
    positions = {0: _at('checkpoint', SAME), 1: _at('backward', SAME, iteration=3), 2: None}
    diagnosis = diagnose(positions, 180, blocking=True, lines=MMENGINE_LINES)
    assert not diagnosis.stop
    assert 'rank 1 waits for rank 0, busy outside collectives' in diagnosis.text
    assert 'rank 2: does not answer' in diagnosis.text


def test_waiting_for_a_rank_that_does_not_answer_goes_on():
    diagnosis = diagnose({0: _at('backward', SAME), 1: None}, 180, blocking=True, lines=MMENGINE_LINES)
    assert not diagnosis.stop and 'rank 1 has not answered' in diagnosis.text


def test_a_rank_that_raised_is_named():
    positions = {0: _at('settling', SAME),
                 1: _at('forward', SAME[:1], error='ValueError: no boxes')}
    diagnosis = diagnose(positions, 180, blocking=False, lines=MMENGINE_LINES)
    assert diagnosis.stop
    assert 'rank 1: raised ValueError: no boxes (iteration 3, forward)' in diagnosis.text
    assert 'rank 1 raised while the other ranks wait for it.' in diagnosis.text


def test_every_rank_gets_the_same_words():
    positions = {0: _at('forward', SAME, call=IN_ALL_GATHER), 1: _at('settling', SAME[:1])}
    assert diagnose(positions, 60, True, MMENGINE_LINES).text == \
        diagnose(dict(positions), 60, True, MMENGINE_LINES).text


@pytest.mark.parametrize('value', [0, -5, True, '180'])
def test_a_bad_stall_timeout_names_the_option_and_the_fix(single_rank_group, value):
    with pytest.raises(ValueError, match=r"stall_timeout must be a positive number of "
                       r"seconds, or None to turn the stall guard off, not .*stall_timeout=600"):
        GuardedDDP(nn.Linear(2, 2), stall_timeout=value)


def test_one_process_runs_no_watchdog(single_rank_group):
    assert GuardedDDP(nn.Linear(2, 2)).stall_watchdog is None


def test_the_same_collective_in_another_iteration_is_no_difference():
    """A joined rank's shadow all-reduce (torch's Join) or another thread's collective
    carries another rank's iteration: the ranks still pair it, so the run goes on."""
    positions = {0: _at('hooks', [_entry(0, BUCKET, iteration=7)], iteration=7),
                 1: _at('hooks', [_entry(0, BUCKET, iteration=9)], iteration=9)}
    assert not diagnose(positions, 180, blocking=False, lines=MMENGINE_LINES).stop


def test_another_threads_collectives_are_not_held_to_the_training_iteration():
    """Rank 1's saver thread issued a barrier on its own group that rank 0's has not yet:
    rank 0 went on to the next iteration, which says nothing of that thread."""
    saver = {'ranks 0,1 from thread saver': dict(issued=1, entries=[
        _entry(0, (None, None, 'save', 'tools/saver.py', 3), 'barrier', None)])}
    positions = {0: _at('forward', SAME, iteration=4), 1: _at('forward', SAME, iteration=3)}
    positions[1]['groups'].update(saver)
    positions[0]['groups']['ranks 0,1 from thread saver'] = dict(issued=0, entries=[])
    assert not diagnose(positions, 180, blocking=False, lines=MMENGINE_LINES).stop
    # The same on the training thread's group is a rank gone past it.
    positions[1]['groups']['ranks 0,1'] = positions[1]['groups'].pop(
        'ranks 0,1 from thread saver')
    positions[0]['groups']['ranks 0,1'] = positions[0]['groups'].pop(
        'ranks 0,1 from thread saver')
    assert diagnose(positions, 180, blocking=False, lines=MMENGINE_LINES).stop


def test_a_difference_older_than_the_kept_entries_shows_in_the_digests():
    kept = [_entry(300, BUCKET, digest=11)]
    positions = {0: _at('backward', kept),
                 1: _at('backward', [_entry(300, BUCKET, digest=12)])}
    diagnosis = diagnose(positions, 180, blocking=False, lines=MMENGINE_LINES)
    assert diagnosis.stop
    assert 'their collectives differ before their 301st (the digests of their sequences ' \
        'differ' in diagnosis.text
    positions[1] = _at('backward', kept)
    assert not diagnose(positions, 180, blocking=False, lines=MMENGINE_LINES).stop
