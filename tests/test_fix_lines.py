"""Every fix the guard prints names the lines of the framework in use: MMEngine's
``model_wrapper_cfg`` and GuardedDDP, or under mmcv 1.x the config's top-level
``find_unused_parameters``, ``ddp_guard = dict(...)`` and the ``custom_imports`` line, with the
wrapper the user has. Both adapters' trainings print these (tests/test_guarded_ddp_options.py,
tests/openmmlab1/); here each message is read whole, for both frameworks."""
import pytest

from mmdet3d_ddp_guard.core.config_lines import MMCV1_LINES, MMENGINE_LINES
from mmdet3d_ddp_guard.core.decision_policy import (CONFIG_TOP_LEVEL, DecisionPolicy,
                                                    not_given, resolve_request)
from mmdet3d_ddp_guard.core.errors import static_graph_changed_error, unused_parameters_error
from mmdet3d_ddp_guard.core.param_table import ParamTable
from mmdet3d_ddp_guard.core.stall_guard import check_stall_timeout
from mmdet3d_ddp_guard.examples import ToyDetector

MMCV1_WRAPPER = 'MMDistributedDataParallel (guarded by mmdet3d_ddp_guard)'
FIXES = {
    'mmengine': dict(
        lines=MMENGINE_LINES, wrapper='GuardedDDP',
        strict="Fix: let the guard handle them, in your config:\n"
               "    model_wrapper_cfg = dict(type='GuardedDDP', find_unused_parameters='auto')\n"
               'and delete any top-level `find_unused_parameters = False`.',
        static_graph="Fix: remove static_graph=True from model_wrapper_cfg and let GuardedDDP "
                     "choose: model_wrapper_cfg = dict(type='GuardedDDP').",
        stall_timeout="e.g. model_wrapper_cfg = dict(type='GuardedDDP', stall_timeout=600)",
        mode="Write e.g. model_wrapper_cfg = dict(type='GuardedDDP', "
             "find_unused_parameters='auto')"),
    'mmcv-full': dict(
        lines=MMCV1_LINES, wrapper=MMCV1_WRAPPER,
        strict="Fix: let the guard handle them, in your config:\n"
               "    find_unused_parameters = 'auto'\n"
               'in place of `find_unused_parameters = False` (written in your config, it also '
               'overrides the False of a _base_ config).',
        static_graph="Fix: remove static_graph=True (or _set_static_graph()) from the "
                     "training script's MMDistributedDataParallel(...) and let the guard "
                     'choose (the custom_imports line is all it needs).',
        stall_timeout='e.g. ddp_guard = dict(stall_timeout=600)',
        mode="Write e.g. find_unused_parameters = 'auto'"),
}


@pytest.fixture(params=sorted(FIXES))
def fix(request):
    return FIXES[request.param]


def _table():
    return ParamTable(ToyDetector('skip_odd'))


def test_the_strict_stop_names_the_framework_s_line(fix):
    text = str(unused_parameters_error(_table(), {0: (0, 1)}, 3, CONFIG_TOP_LEVEL,
                                       fix['lines']))
    assert text.startswith(f"{fix['wrapper']}: parameters received no gradient in "
                           'iteration 3 on rank(s) 0')
    assert fix['strict'] in text


def test_the_static_graph_stop_names_the_framework_s_fix(fix):
    text = str(static_graph_changed_error(_table(), (0, ), (1, ), 2, 0, fix['lines']))
    assert text.startswith(f"{fix['wrapper']}: static_graph=True")
    assert text.endswith(fix['static_graph'])


def test_a_bad_stall_timeout_names_the_framework_s_option(fix):
    with pytest.raises(ValueError) as raised:
        check_stall_timeout(0, fix['lines'])
    assert str(raised.value).startswith(f"{fix['wrapper']}: stall_timeout must be a positive")
    assert str(raised.value).endswith(fix['stall_timeout'])


def test_a_bad_mode_names_the_framework_s_line(fix):
    with pytest.raises(TypeError) as raised:
        resolve_request(not_given(), 1, built_by_runner=False, lines=fix['lines'])
    assert str(raised.value).startswith(fix['wrapper'])
    assert str(raised.value).endswith(fix['mode'])


def test_the_decision_names_the_wrapper_and_no_other_framework(fix):
    decision = DecisionPolicy(True, CONFIG_TOP_LEVEL, False, fix['lines']).decision
    text = decision.format()
    assert text.startswith(f"{fix['wrapper']} decision (at build): mode='find_unused'")
    assert "add this line to your config: find_unused_parameters='auto'" in decision.reason
    if fix['lines'] is MMCV1_LINES:
        for text in (text, fix['strict'], fix['static_graph'], fix['stall_timeout']):
            assert 'model_wrapper_cfg' not in text and 'GuardedDDP' not in text
