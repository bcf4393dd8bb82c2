"""The mmcv 1.x adapter's own stops, read whole in mmcv 1.x's words (tests/test_fix_lines.py
reads the core's, for both frameworks; these need mmcv-full 1.x to import): a user there has
neither ``model_wrapper_cfg`` nor GuardedDDP, so a fix naming them does nothing."""
import pytest

from mmdet3d_ddp_guard.openmmlab1.step_errors import (BACKWARD_RAISED, LATE_BACKWARD,
                                                      PARTIAL_BACKWARD)

PARAM = 'roi_head.refiner.0.weight'
HOOK = 'GradientCumulativeOptimizerHook'


@pytest.mark.parametrize('template', [LATE_BACKWARD, BACKWARD_RAISED, PARTIAL_BACKWARD],
                         ids=['late_backward', 'backward_raised', 'partial_backward'])
def test_a_stop_between_backwards_names_a_fix_in_mmcv_1_x_words(template):
    # format() ignores the keywords a template does not use, as the wrapper passes them.
    text = template.format(param=PARAM, hook=HOOK)
    assert text.startswith('mmdet3d_ddp_guard: ')
    assert HOOK in text and '{' not in text and '}' not in text
    assert 'Fix: ' in text
    assert 'model_wrapper_cfg' not in text and 'GuardedDDP' not in text


def test_a_late_backward_names_the_parameter():
    assert LATE_BACKWARD.format(param=PARAM, hook=HOOK).count(PARAM) == 2
