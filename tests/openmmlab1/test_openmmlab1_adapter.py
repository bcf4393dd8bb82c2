"""The adapter where only mmcv-full 1.x is installed: what the import guards, what the
config's keys mean, and the errors that name the fix."""
import importlib.util

import pytest
import torch
import torch.nn as nn
from mmcv.parallel import MMDistributedDataParallel
from mmcv.utils import Config

import mmdet3d_ddp_guard
from mmdet3d_ddp_guard.openmmlab1 import GuardedMMDistributedDataParallel
from mmdet3d_ddp_guard.openmmlab1.cpu_launch import CPUCompatibleMMDistributedDataParallel
from mmdet3d_ddp_guard.openmmlab1.guarded_mmcv_ddp import resolve_config_request


class TwoHeads(nn.Module):
    """A mmcv-style model: ``train_step`` returns the loss, the optimizer hook runs the
    backward; ``head_b`` only when the batch asks for it."""

    def __init__(self):
        super().__init__()
        self.head_a = nn.Linear(3, 1)
        self.head_b = nn.Linear(3, 1)

    def train_step(self, data, optimizer):
        loss = self.head_a(data['x']).mean()
        if data['use_b']:
            loss = loss + self.head_b(data['x']).mean()
        return dict(loss=loss, log_vars=dict(loss=loss.item()), num_samples=1)


def test_only_mmcv_full_is_installed_and_the_package_imports():
    assert set(mmdet3d_ddp_guard.FRAMEWORKS) == {'mmcv-full'}
    assert importlib.util.find_spec('mmengine') is None
    assert 'GuardedMMDistributedDataParallel' in mmdet3d_ddp_guard.__all__
    assert not hasattr(mmdet3d_ddp_guard, 'GuardedDDP')


def _build(cfg: Config, **kwargs):
    # The wrapper finds the training's config on the call stack, as train_detector holds it.
    return MMDistributedDataParallel(TwoHeads(), **kwargs)


def test_every_mmcv_ddp_built_after_the_import_is_guarded_unless_turned_off(
        single_rank_group):
    guarded = _build(Config(dict()))
    assert type(guarded) is GuardedMMDistributedDataParallel
    assert guarded.decision.mode == 'complete'
    assert guarded.stall_watchdog is None  # one rank: nothing to compare with
    plain = _build(Config(dict(ddp_guard=dict(enabled=False))))
    assert type(plain) is CPUCompatibleMMDistributedDataParallel  # no CUDA here


@pytest.mark.parametrize('config,script,expected', [
    (None, False, 'auto'),
    (dict(), False, 'auto'),
    (dict(), True, True),
    (dict(find_unused_parameters=False), False, False),
    (dict(find_unused_parameters=True), False, True),
    (dict(find_unused_parameters=False), True, False),  # a script that ignores the key
    (dict(find_unused_parameters='auto'), False, 'auto'),
])
def test_what_the_config_wrote_wins_and_the_scripts_default_is_no_choice(config, script,
                                                                          expected):
    requested, source = resolve_config_request(script, None if config is None
                                               else Config(config))
    assert requested == expected
    if config and 'find_unused_parameters' in config:
        assert source == 'the config (top-level find_unused_parameters)'


def test_bad_options_name_the_option_and_the_fix(single_rank_group):
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['stall_timout'\] in the "
                                         r"config's ddp_guard = dict\(...\); the options are "
                                         r'stall_timeout, enabled'):
        _build(Config(dict(ddp_guard=dict(stall_timout=60))))
    with pytest.raises(TypeError, match=r'ddp_guard.enabled must be True or False'):
        _build(Config(dict(ddp_guard=dict(enabled='no'))))
    with pytest.raises((TypeError, ValueError), match='stall_timeout'):
        _build(Config(dict(ddp_guard=dict(stall_timeout=-1))))
    with pytest.raises(ValueError, match=r"find_unused_parameters='yes'.*not a known mode"):
        _build(Config(dict(find_unused_parameters='yes')))


def test_a_loss_that_the_hook_does_not_backpropagate_is_named_at_the_next_step(
        single_rank_group):
    model = _build(Config(dict()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    outputs = model.train_step(dict(x=torch.ones(2, 3), use_b=False), optimizer)
    torch.autograd.backward(outputs['loss'])  # not the loss's own backward(): no settling
    with pytest.raises(RuntimeError, match=r'returned in iteration 0 was not '
                                           r'back-propagated through its own backward\(\)'):
        model.train_step(dict(x=torch.ones(2, 3), use_b=False), optimizer)


def test_the_settling_backward_survives_the_hooks_arithmetic(single_rank_group):
    """GradientCumulativeOptimizerHook divides the loss, the fp16 hook scales it: the
    results keep the settling backward; head_b, unused, gets grad None as under DDP's
    graph search, head_a its gradient."""
    model = _build(Config(dict()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        outputs = model.train_step(dict(x=torch.ones(2, 3), use_b=False), optimizer)
        optimizer.zero_grad(set_to_none=True)
        (outputs['loss'] / 2 * 512.0).backward()
        optimizer.step()
    assert model.module.head_b.weight.grad is None
    assert model.module.head_a.weight.grad is not None
    assert model.completion.iterations_ended == 2


def test_a_comm_hook_of_ones_own_is_refused_where_the_counts_ride_the_all_reduce(
        single_rank_group):
    model = _build(Config(dict()))
    with pytest.raises(RuntimeError, match=r"mode 'complete' the gradient all-reduce already "
                                           r"runs through the guard's comm hook.*write "
                                           r'find_unused_parameters = True'):
        model.register_comm_hook(None, lambda state, bucket: None)
    graph = _build(Config(dict(find_unused_parameters=True)))
    graph.register_comm_hook(None, _allreduce)  # DDP's graph search takes one


def _allreduce(state, bucket):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    return allreduce_hook(None, bucket)
