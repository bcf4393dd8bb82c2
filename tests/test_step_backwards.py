"""When a training step's backwards are over (guard/step_backwards.py), on every torch of the
version matrix: one process, real autograd, real reentrant checkpointing; the settling is a
stand-in for the guarded wrapper that completes unreached parameters with zeros, as the
mmcv 1.x adapter's settling does (tests/openmmlab1/test_step_backwards.py trains the adapter
itself on 2 ranks)."""
import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from mmdet3d_ddp_guard.guard.step_backwards import StepBackwards, StepErrorTexts
from mmdet3d_ddp_guard.guard.usage_record import ParamUsageRecord

# The texts name the error and what it carries, so that the tests can read them back.
TEXTS = StepErrorTexts(own_backward_in_train_step='own backward: {model}',
                       late_backward='{param}', backward_raised='raised: {hook}',
                       partial_backward='partial: {hook}')


class Steps:
    """A model, its record and a StepBackwards whose settling is recorded: the stand-in for
    the guarded wrapper (its ``usage_record``, ``module``, ``enter_backward`` and
    ``settle_after_backward``)."""

    def __init__(self, waits_for_outputs: bool = True):
        torch.manual_seed(0)
        self.model = self.module = nn.ModuleDict(dict(trunk=nn.Linear(3, 3),
                                                      head_a=nn.Linear(3, 1),
                                                      head_b=nn.Linear(3, 1)))
        self.record = self.usage_record = ParamUsageRecord(self.model)
        self.settled = []  # per settling: names of the parameters reached by then
        self.backwards = StepBackwards(self, TEXTS, waits_for_outputs)

    def enter_backward(self):
        pass

    def settle_after_backward(self, reduces, iteration):
        table = self.record.table
        self.settled.append(sorted(set(table.names) - {table.names[i]
                                                        for i in self.record.local_unused()}))
        unreached = [table.params[i] for i in self.record.local_unreached()]
        if unreached:
            torch.autograd.backward(unreached, [torch.zeros_like(p) for p in unreached])
        return unreached

    def begin(self):
        self.backwards.begin_step(0, 'the optimizer hook')
        self.record.start_iteration()
        self.model.zero_grad()

    def losses(self, x=None):
        x = torch.ones(2, 3) if x is None else x
        features = self.model['trunk'](x)
        return self.model['head_a'](features).sum(), self.model['head_b'](features).sum()


ALL = ['head_a.bias', 'head_a.weight', 'head_b.bias', 'head_b.weight', 'trunk.bias',
       'trunk.weight']


def test_a_checkpointed_head_settles_at_the_end_of_the_outer_backward():
    steps = Steps()
    steps.begin()
    features = steps.model['trunk'](torch.ones(2, 3))

    def heads(f):
        return steps.model['head_a'](f).sum() + steps.model['head_b'](f).sum()
    loss = checkpoint(heads, features)
    steps.backwards.expect_backwards([loss], reduces=True)
    loss.backward()
    assert steps.settled == [ALL]
    assert steps.model['trunk'].weight.grad.abs().sum() > 0  # not completed with zeros


def test_a_checkpointed_block_settles_at_the_outer_end_also_without_the_returned_loss():
    """The backward of a tensor ``train_step`` did not return: the first parameter reached
    inside the checkpoint's nested backward does not arm the settling."""
    steps = Steps()
    steps.begin()
    features = steps.model['trunk'](torch.ones(2, 3))
    loss = checkpoint(lambda f: steps.model['head_a'](f).sum() + steps.model['head_b'](f).sum(),
                      features)
    steps.backwards.expect_backwards([], reduces=True)
    (loss * 2).backward()
    assert steps.settled == [ALL]


def test_two_backwards_settle_once_after_the_second():
    steps = Steps()
    steps.begin()
    loss_a, loss_b = steps.losses()
    steps.backwards.expect_backwards([loss_a + loss_b], reduces=True)
    loss_a.backward(retain_graph=True)
    assert steps.settled == []  # the returned loss still reaches head_b: DDP would wait
    loss_b.backward()
    assert steps.settled == [ALL]


def test_a_later_backward_into_a_parameter_already_completed_is_an_error():
    steps = Steps()
    steps.begin()
    loss_a, _ = steps.losses()
    steps.backwards.expect_backwards([loss_a], reduces=True)  # head_b is not in its graph
    loss_a.backward()
    assert steps.settled == [['head_a.bias', 'head_a.weight', 'trunk.bias', 'trunk.weight']]
    _, other_b = steps.losses()
    with pytest.raises(RuntimeError) as raised:
        other_b.backward()
    # head_b's first parameter the backward reaches (its weight's shape differs from the
    # trunk's and head_a's: found by identity, not compared as tensors).
    assert raised.value.args[0] in ('head_b.weight', 'head_b.bias')


def test_a_backward_that_left_part_of_the_returned_loss_is_named_at_the_next_step():
    steps = Steps()
    steps.begin()
    loss_a, loss_b = steps.losses()
    steps.backwards.expect_backwards([loss_a + loss_b], reduces=True)
    loss_a.backward()
    with pytest.raises(RuntimeError, match='^partial: '):
        steps.begin()


def test_as_torch_s_ddp_an_output_left_out_of_the_first_backward_is_unused():
    """``waits_for_outputs=False`` (a plain loop under torch's DDP, whose ``_DDPSink`` gives
    a returned tensor the loss left out an undefined gradient): the first backward settles
    the step with head_b unused, the next step starts clean, and a later backward of the
    same step into head_b is the error ``late_backward``."""
    steps = Steps(waits_for_outputs=False)
    steps.begin()
    loss_a, loss_b = steps.losses()
    steps.backwards.expect_backwards([loss_a, loss_b], reduces=True)
    loss_a.backward(retain_graph=True)
    assert steps.settled == [['head_a.bias', 'head_a.weight', 'trunk.bias', 'trunk.weight']]
    with pytest.raises(RuntimeError) as raised:
        loss_b.backward()
    assert raised.value.args[0] in ('head_b.weight', 'head_b.bias')
    steps.begin()
    loss_a, loss_b = steps.losses()
    steps.backwards.expect_backwards([loss_a, loss_b], reduces=True)
    loss_a.backward()
    steps.begin()  # no 'partial' error: the step settled
    assert len(steps.settled) == 2


def test_waiting_for_outputs_needs_the_partial_backward_text():
    texts = StepErrorTexts(own_backward_in_train_step='', late_backward='', backward_raised='')
    with pytest.raises(ValueError, match='partial_backward'):
        StepBackwards(Steps(), texts, waits_for_outputs=True)


def test_a_backward_outside_the_step_is_ignored():
    steps = Steps()
    for _ in range(2):
        steps.begin()
        loss_a, loss_b = steps.losses()
        steps.backwards.expect_backwards([loss_a + loss_b], reduces=True)
        (loss_a + loss_b).backward()
        sum(steps.losses()).backward()  # a probe after the step: nothing settles again
    assert steps.settled == [ALL, ALL]


@pytest.mark.parametrize('after_reaching', [False, True])
def test_a_backward_that_raises_leaves_nothing_behind(after_reaching):
    steps = Steps()
    steps.begin()
    loss_a, loss_b = steps.losses()
    loss = loss_a + loss_b
    steps.backwards.expect_backwards([loss], reduces=True)

    def out_of_memory(grad):
        raise RuntimeError('out of memory')
    (loss_a if after_reaching else loss).register_hook(out_of_memory)
    with pytest.raises(RuntimeError, match='out of memory'):
        loss.backward()
    if after_reaching:  # head_b was reached, so DDP's reducer holds it as ready
        with pytest.raises(RuntimeError, match='^raised: '):
            steps.begin()
        return
    steps.begin()  # clean: the next step settles as usual
    loss_a, loss_b = steps.losses()
    steps.backwards.expect_backwards([loss_a + loss_b], reduces=True)
    (loss_a + loss_b).backward()
    assert steps.settled == [ALL]
