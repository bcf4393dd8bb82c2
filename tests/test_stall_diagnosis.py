"""The stall guard's judgement of positions and its option (tests/test_layout.py checks that
it imports no framework)."""

import pytest
import torch.nn as nn

from mmdet3d_ddp_guard import GuardedDDP
from mmdet3d_ddp_guard.core.stall_guard import diagnose

TYPES = {'refiner.1': 'NaiveSyncBatchNorm1d'}


def _at(phase, iteration=3, inside=None, call=None, error=None, finished=None):
    return dict(iteration=iteration, phase=phase, inside=inside,
                inside_call=1 if inside else None, call=call, error=error,
                finished=finished or {str(iteration - 1): {'refiner.1': 1}}, seq=None,
                moves=0, pid=0)


def test_every_rank_in_the_same_collective_is_slow_not_hung():
    positions = {0: _at('backward'), 1: _at('settling')}
    diagnosis = diagnose(positions, TYPES, 180)
    assert not diagnosis.stop
    assert 'Every rank waits in the same collective: slow, not a hang' in diagnosis.text


def test_waiting_for_a_busy_rank_is_not_a_hang():
    positions = {0: _at('checkpoint'), 1: _at('backward', iteration=4), 2: None}
    diagnosis = diagnose(positions, TYPES, 180)
    assert not diagnosis.stop
    assert 'rank 1 waits for rank 0, busy outside collectives' in diagnosis.text
    assert 'rank 2: does not answer' in diagnosis.text


def test_waiting_for_a_rank_that_does_not_answer_goes_on():
    diagnosis = diagnose({0: _at('backward'), 1: None}, TYPES, 180)
    assert not diagnosis.stop and 'which has not answered' in diagnosis.text


def test_different_collectives_cannot_meet_even_beside_a_silent_rank():
    call = dict(op='all_reduce', where='losses.py:12 in loss')
    positions = {0: _at('forward', call=call), 1: _at('backward'), 2: None}
    diagnosis = diagnose(positions, TYPES, 180)
    assert diagnosis.stop
    assert ("they wait in different collectives (rank 0 in all_reduce called from "
            "losses.py:12 in loss (iteration 3, forward); rank 1 in DDP's gradient "
            'all-reduce (iteration 3, backward))') in diagnosis.text


def test_a_forward_collective_run_twice_on_one_rank_and_once_on_another():
    positions = {0: _at('hooks', finished={'3': {'refiner.1': 2}}),
                 1: _at('hooks', finished={'3': {'refiner.1': 1}})}
    diagnosis = diagnose(positions, TYPES, 180)
    assert diagnosis.stop
    assert ("in iteration 3 rank 0 ran refiner.1 (NaiveSyncBatchNorm1d)'s collective "
            'twice, rank 1 ran it once') in diagnosis.text


def test_every_rank_gets_the_same_words():
    positions = {0: _at('forward', inside='refiner.1'), 1: _at('settling')}
    assert diagnose(positions, TYPES, 60).text == diagnose(dict(positions), TYPES, 60).text


@pytest.mark.parametrize('value', [0, -5, True, '180'])
def test_a_bad_stall_timeout_names_the_option_and_the_fix(single_rank_group, value):
    with pytest.raises(ValueError, match=r"stall_timeout must be a positive number of "
                       r"seconds, or None to turn the stall guard off, not .*stall_timeout=600"):
        GuardedDDP(nn.Linear(2, 2), stall_timeout=value)


def test_one_process_runs_no_watchdog(single_rank_group):
    assert GuardedDDP(nn.Linear(2, 2)).stall_watchdog is None
