"""The usage record on its own: ground truth in one process."""
import pytest
import torch
import torch.nn as nn

from tests.toys import ToyDetector, make_toy_batch
from mmdet3d_ddp_guard.guard.param_table import ParamTable
from mmdet3d_ddp_guard.messages.parameter_text import grouped_lines
from mmdet3d_ddp_guard.guard.iteration_usage import UsageStatistics
from mmdet3d_ddp_guard.guard.usage_record import ParamUsageRecord


def test_zero_gradient_is_used_and_unreached_is_unused():
    model = nn.ModuleDict(dict(zeroed=nn.Linear(2, 1), skipped=nn.Linear(2, 1)))
    record = ParamUsageRecord(model)
    record.start_iteration()
    (model['zeroed'](torch.ones(1, 2)) * 0).sum().backward()
    record.end_local_iteration(0)
    usage = record.last
    assert torch.equal(model['zeroed'].weight.grad, torch.zeros(1, 2))
    assert [record.table.names[i] for i in usage.local_unused] == ['skipped.weight',
                                                                    'skipped.bias']


def test_undefined_gradient_is_unused_but_reached():
    """A custom Function returning None for a weight: autograd runs the weight's hooks and
    leaves its gradient undefined. Unused (as for DDP's graph search), yet not unreached
    (DDP's hooks fired: completing it again would mark it ready twice)."""
    model = ToyDetector('undefined_grad')
    record = ParamUsageRecord(model)
    record.start_iteration()
    sum(model(**make_toy_batch(0, 0)).values()).backward()
    assert model.gate.grad is None
    names = record.table.names
    assert sorted(names[i] for i in record.local_unused()) == model.expected_unused(0, 0)
    assert sorted(names[i] for i in record.local_unreached()) == ['dead.bias', 'dead.weight']


def test_frozen_parameters_are_not_tracked():
    model = ToyDetector('dead_layer')
    model.dead.requires_grad_(False)
    assert 'dead.weight' not in ParamTable(model).names


def test_single_process_record_matches_the_model_truth():
    model = ToyDetector('skip_odd')
    record = ParamUsageRecord(model)
    for iteration in range(4):
        record.start_iteration()
        sum(model(**make_toy_batch(iteration, 0)).values()).backward()
        record.end_local_iteration(iteration)
        usage = record.last
        model.zero_grad(set_to_none=True)
        assert sorted(record.table.names[i] for i in usage.local_unused) == \
            model.expected_unused(iteration, 0)
    assert record.statistics.set_changes == 3


def test_grouped_names_stay_compact():
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(30)])
    table = ParamTable(model)
    lines = grouped_lines(table, range(len(table)), limit=5)
    assert len(lines) == 6
    assert lines[0] == '0 (Linear): weight, bias [6 elements]'
    assert lines[-1] == '... and 25 more modules (50 parameters)'


def test_statistics_refuse_a_checkpoint_of_another_model():
    state = UsageStatistics(3).state_dict()
    with pytest.raises(ValueError, match='checkpoint counts 3 trainable parameters'):
        UsageStatistics(4).load_state_dict(state)


def test_statistics_of_an_older_checkpoint_count_every_unused_iteration_as_failing():
    # Checkpoints written before the statistics told unreached from undefined gradients.
    state = UsageStatistics(3).state_dict()
    state.update(first_unused_iteration=4, iterations_with_unused=1)
    del state['first_unreached_iteration']
    statistics = UsageStatistics(3)
    statistics.load_state_dict(state)
    assert statistics.first_unreached_iteration == 4
