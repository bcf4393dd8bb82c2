"""Every fix the guard prints names the lines of the framework in use: MMEngine's
``model_wrapper_cfg`` and GuardedDDP, or under mmcv 1.x the config's top-level
``find_unused_parameters``, ``ddp_guard = dict(...)`` and the ``custom_imports`` line, with the
wrapper the user has. Both adapters' trainings print these (tests/test_guarded_ddp_options.py,
tests/openmmlab1/); here each message is read whole, for both frameworks. The mmcv 1.x
adapter's own messages need mmcv-full 1.x to import: tests/openmmlab1/test_fix_lines_mmcv1.py
reads them in the openmmlab1 leg."""
import warnings
from types import SimpleNamespace

import pytest
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard.guard.completion import UnusedCompletion
from mmdet3d_ddp_guard.environment.framework_table import MMCV1_LINES, MMENGINE_LINES
from mmdet3d_ddp_guard.messages.decision_text import decision_message
from mmdet3d_ddp_guard.guard.decision_policy import DecisionPolicy
from mmdet3d_ddp_guard.messages.mode_request import CONFIG_TOP_LEVEL, not_given, read_request
from mmdet3d_ddp_guard.guard.errors import static_graph_changed_error, unused_parameters_error
from mmdet3d_ddp_guard.environment.framework_table import MMCV1, MMENGINE
from mmdet3d_ddp_guard.guard.param_table import ParamTable
from mmdet3d_ddp_guard.stall_guard import check_stall_timeout
from mmdet3d_ddp_guard.guard.usage_record import ParamUsageRecord
from mmdet3d_ddp_guard.environment.versions import TESTED_TORCHES, check_torch
from tests.toys import ToyDetector

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
             "find_unused_parameters='auto')",
        framework=MMENGINE,
        old_torch="or remove mmdet3d_ddp_guard from custom_imports and "
                  "`model_wrapper_cfg = dict(type='GuardedDDP')` (or the "
                  '_base_ file that holds it) from your config, and set '
                  'find_unused_parameters = True in it instead.',
        comm_hook="GuardedDDP: the last gradient bucket was not reduced in this backward; "
                  "another comm hook may have replaced the guard's."),
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
        mode="Write e.g. find_unused_parameters = 'auto'",
        framework=MMCV1,
        old_torch='or remove mmdet3d_ddp_guard from custom_imports and set '
                  'find_unused_parameters = True in your config instead.',
        comm_hook=f'{MMCV1_WRAPPER}: the last gradient bucket was not reduced in this '
                  "backward; another comm hook may have replaced the guard's."),
}
#: The words no message may give a mmcv 1.x user: MMEngine's, which do nothing there.
MMENGINE_ONLY = ('model_wrapper_cfg', 'GuardedDDP')


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
        read_request(not_given(), 1, built_by_runner=False, lines=fix['lines'])
    assert str(raised.value).startswith(fix['wrapper'])
    assert str(raised.value).endswith(fix['mode'])


def test_the_decision_names_the_wrapper_and_no_other_framework(fix):
    decision = DecisionPolicy(True, CONFIG_TOP_LEVEL, False, fix['lines']).decision
    text = decision_message(decision)
    assert text.startswith(f"{fix['wrapper']} decision (at build): mode='find_unused'")
    assert "add this line to your config: find_unused_parameters='auto'" in decision.reason
    if fix['lines'] is MMCV1_LINES:
        for text in (text, fix['strict'], fix['static_graph'], fix['stall_timeout']):
            assert 'model_wrapper_cfg' not in text and 'GuardedDDP' not in text


def test_an_old_torch_is_refused_with_the_framework_s_way_back(fix):
    # Raised at `import mmdet3d_ddp_guard`, before either adapter loads: the words come from
    # the installed frameworks, here given.
    with pytest.raises(RuntimeError) as raised:
        check_torch('1.8.1+cu111', (3, 8), frameworks=[fix['framework']])
    assert str(raised.value) == (
        f'mmdet3d_ddp_guard supports torch >= 1.9 (tested on {", ".join(TESTED_TORCHES)}), '
        'but torch 1.8.1+cu111 is installed: its DDP comm hook cannot tell the last gradient '
        'bucket, which the guard needs. Upgrade torch to 1.9 or newer (e.g. pip install '
        'torch==1.9.1, which mmcv-full 1.x and mmcv 2.x both have wheels for), '
        + fix['old_torch'])
    if fix['framework'] == MMCV1:
        assert not any(word in str(raised.value) for word in MMENGINE_ONLY)


def test_where_both_frameworks_are_installed_the_way_back_names_each():
    with pytest.raises(RuntimeError) as raised:
        check_torch('1.8.1', (3, 8), frameworks=[MMENGINE, MMCV1])
    assert str(raised.value).endswith(
        "both have wheels for), or under MMEngine, remove mmdet3d_ddp_guard from custom_imports "
        "and `model_wrapper_cfg = dict(type='GuardedDDP')` (or the "
        '_base_ file that holds it) from your config, and set '
        'find_unused_parameters = True in it instead; under mmcv-full 1.x, remove '
        'mmdet3d_ddp_guard from custom_imports and set find_unused_parameters = True in your '
        'config instead.')


def test_a_newer_torch_is_warned_of_in_words_both_frameworks_share():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        check_torch('2.15.0', (3, 8))
    assert [str(warning.message) for warning in caught] == [
        'mmdet3d_ddp_guard was tested up to torch 2.14; torch 2.15.0 is newer. It should '
        'work; if training with mmdet3d_ddp_guard fails, please report it with this '
        'version.']
    assert not any(word in str(caught[0].message) for word in MMENGINE_ONLY)


@pytest.mark.parametrize('framework', ['mmengine', 'mmcv-full'])
def test_a_comm_hook_that_replaced_the_guard_s_is_named_in_the_framework_s_words(
        framework, monkeypatch):
    # The guard's comm hook never registered, as when another replaced it: the settle after
    # a backward finds no counts on the last bucket.
    fix = FIXES[framework]
    monkeypatch.setattr(DistributedDataParallel, 'register_comm_hook', lambda *args: None)
    model = ToyDetector('skip_odd')
    completion = UnusedCompletion(SimpleNamespace(process_group=None), ParamUsageRecord(model),
                                  DecisionPolicy('auto', 'default', False, fix['lines']))
    with pytest.raises(RuntimeError) as raised:
        completion.settle(reduces=True, iteration=0)
    assert str(raised.value) == fix['comm_hook']
    if fix['framework'] == MMCV1:
        assert not any(word in str(raised.value) for word in MMENGINE_ONLY)
