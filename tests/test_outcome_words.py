"""The live side (UnusedParamsHook's summary, GuardedDDP's decision) and `check` name plain
DDP's outcome in the same words (mmdet3d_ddp_guard.messages.ddp_outcome)."""
import pytest

from mmdet3d_ddp_guard.environment.framework_table import MMENGINE_LINES
from mmdet3d_ddp_guard.messages.ddp_outcome import FAILS, OK, UNDEFINED_GRADIENTS_ONLY, outcome_line
from mmdet3d_ddp_guard.guard.decision_policy import DecisionPolicy
from tests.toys import ToyDetector
from mmdet3d_ddp_guard.guard.param_table import ParamTable
from mmdet3d_ddp_guard.guard.iteration_usage import IterationUsage, UsageStatistics
from mmdet3d_ddp_guard.reporting.summary import summary_dict, summary_text


@pytest.mark.parametrize('ranks_left_unreached, outcome, words', [
    (1, FAILS, outcome_line(FAILS, 0)),
    # The same parameters reached with undefined gradients: DDP reduces zeros, no failure.
    (0, OK, UNDEFINED_GRADIENTS_ONLY),
])
def test_hook_summary_and_decision_say_the_outcome_as_check_does(ranks_left_unreached,
                                                                  outcome, words):
    table = ParamTable(ToyDetector('rank_dependent'))
    statistics = UsageStatistics(len(table))
    # Rank 1 left the branch unused in iteration 0, rank 0 did not.
    branch = (table.names.index('branch.weight'), table.names.index('branch.bias'))
    usage = IterationUsage(0, 0, (), ((), branch), ranks_left_unreached)
    statistics.update(usage)
    summary = summary_dict(table, statistics, world_size=2,
                           guard_setting=MMENGINE_LINES.guard)
    assert summary['verdict']['plain_ddp_outcome'] == outcome
    assert words in summary_text(summary)
    decision = DecisionPolicy('auto', 'default', False, MMENGINE_LINES).observe(
        usage, statistics, table)
    assert words in decision.reason and 'hangs' not in decision.reason
