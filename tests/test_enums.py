"""The guard's modes (``Mode``) and the stall guard's phases (``Phase``) are enums whose
members read exactly as the plain strings they replaced: in ``str``, f-strings, ``repr``,
``json.dumps`` and as dict keys, on every Python the package supports (Enum's own
formatting changed in 3.12), so that messages, logs and JSON files stay byte-identical."""
import json

import pytest
import torch.nn as nn

from mmdet3d_ddp_guard.guard.decision_policy import COMPLETE, Mode, initial_decision
from mmdet3d_ddp_guard.environment.framework_table import MMENGINE_LINES
from mmdet3d_ddp_guard.messages.decision_text import MODE_EXPLANATIONS, decision_message
from mmdet3d_ddp_guard.stall_guard import Phase, RankPosition
from mmdet3d_ddp_guard.stall_guard.phases import GRADIENT_PHASES

MEMBERS = [*Mode, *Phase]


@pytest.mark.parametrize('member', MEMBERS, ids=str)
def test_a_member_reads_as_its_value(member):
    value = member.value
    assert type(value) is str
    assert member == value and hash(member) == hash(value)
    assert str(member) == value and type(str(member)) is str
    assert f'{member}' == value and f'{member:>20}' == f'{value:>20}'
    assert '{}'.format(member) == value and '%s' % member == value
    assert repr(member) == repr(value) and f'{member!r}' == f'{value!r}'
    assert json.dumps(member) == json.dumps(value)
    assert json.dumps({member: [member]}, indent=1) == json.dumps({value: [value]}, indent=1)
    assert json.loads(json.dumps(member)) == member


def test_the_values_are_the_old_strings():
    assert [mode.value for mode in Mode] == [
        'complete', 'find_unused', 'static_graph', 'strict']
    assert [phase.value for phase in Phase] == [
        'starting', 'data', 'forward', 'backward', 'settling', 'optimizer step', 'hooks',
        'validation', 'checkpoint']
    assert COMPLETE is Mode.COMPLETE
    assert MODE_EXPLANATIONS['strict'] is MODE_EXPLANATIONS[Mode.STRICT]
    assert 'settling' in GRADIENT_PHASES and 'data' not in GRADIENT_PHASES


def test_the_decision_reads_as_before():
    decision = initial_decision(False, 'model_wrapper_cfg', False, MMENGINE_LINES)
    assert decision.mode is Mode.STRICT
    assert decision_message(decision).startswith(
        "GuardedDDP decision (at build): mode='strict' (requested "
        'find_unused_parameters=False, from model_wrapper_cfg)')


def test_a_snapshot_holds_the_plain_string():
    """What crosses to the other ranks, through the store, is the plain string."""
    position = RankPosition(nn.Linear(1, 1))
    position.enter(Phase.OPTIMIZER_STEP)
    snapshot = position.snapshot()
    assert type(snapshot['phase']) is str and snapshot['phase'] == 'optimizer step'
    assert json.loads(json.dumps(snapshot))['phase'] == Phase.OPTIMIZER_STEP
