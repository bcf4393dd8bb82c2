"""The adapter where only mmcv-full 1.x is installed: what the import guards, what the
config's keys mean, and the errors that name the fix."""
import importlib.util

import pytest
import torch
import torch.nn as nn
from mmcv.parallel import DataContainer, MMDistributedDataParallel, collate, scatter_kwargs
from mmcv.utils import Config

import mmdet3d_ddp_guard
from mmdet3d_ddp_guard.environment.framework_table import MMCV1_LINES
from mmdet3d_ddp_guard.openmmlab1 import GuardedMMDistributedDataParallel
from mmdet3d_ddp_guard.openmmlab1.cpu_launch import (CPUCompatibleMMDistributedDataParallel,
                                                     unwrap_for_one_device)
from mmdet3d_ddp_guard.openmmlab1.guarded_mmcv_ddp import read_config_request


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
    # torch alone is a framework too: the plain PyTorch adapter's (mmdet3d_ddp_guard.pytorch).
    assert set(mmdet3d_ddp_guard.FRAMEWORKS) == {'mmcv-full', 'torch'}
    assert importlib.util.find_spec('mmengine') is None
    assert 'GuardedMMDistributedDataParallel' in mmdet3d_ddp_guard.__all__
    assert not hasattr(mmdet3d_ddp_guard, 'GuardedDDP')


def _build(cfg: Config, model=None, **kwargs):
    # The wrapper finds the training's config on the call stack, as train_detector holds it.
    return MMDistributedDataParallel(model or TwoHeads(), **kwargs)


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
    requested, source = read_config_request(script, None if config is None
                                            else Config(config))
    assert requested == expected
    if config and 'find_unused_parameters' in config:
        assert source == 'config top-level find_unused_parameters'


def test_bad_options_name_the_option_and_the_fix(single_rank_group):
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['stall_timout'\] in the "
                                         r"config's ddp_guard = dict\(...\); the options are "
                                         r'stall_timeout, enabled'):
        _build(Config(dict(ddp_guard=dict(stall_timout=60))))
    with pytest.raises(TypeError, match=r'ddp_guard.enabled must be True or False'):
        _build(Config(dict(ddp_guard=dict(enabled='no'))))
    with pytest.raises(ValueError) as raised:
        _build(Config(dict(ddp_guard=dict(stall_timeout=-1))))
    assert str(raised.value).startswith(f'{MMCV1_LINES.wrapper}: stall_timeout must be a '
                                        'positive number of seconds')
    assert str(raised.value).endswith('; e.g. ddp_guard = dict(stall_timeout=600)')
    with pytest.raises(ValueError, match=r"find_unused_parameters='yes'.*not a known mode"):
        _build(Config(dict(find_unused_parameters='yes')))
    with pytest.raises(TypeError) as raised:
        _build(Config(dict(find_unused_parameters=1)))
    assert str(raised.value).endswith("Write e.g. find_unused_parameters = 'auto'")


class OwnBackward(TwoHeads):
    """A model that runs its own backward in ``train_step`` and returns a detached loss."""

    def train_step(self, data, optimizer):
        outputs = super().train_step(data, optimizer)
        outputs['loss'].backward()
        outputs['loss'] = outputs['loss'].detach()
        return outputs


def _step(model, optimizer, use_b, backward):
    optimizer.zero_grad(set_to_none=True)
    outputs = model.train_step(dict(x=torch.ones(2, 3), use_b=use_b), optimizer)
    backward(outputs['loss'])
    optimizer.step()


@pytest.mark.parametrize('backward, settled', [
    (torch.Tensor.backward, 4),
    (lambda loss: torch.autograd.backward(loss), 4),
    (lambda loss: (loss / 2 * 512.0).backward(), 4),  # the cumulative and fp16 hooks' way
    (lambda loss: None, 1),  # a hook that skips a NaN loss: only the last step back-propagates
], ids=['loss.backward', 'torch.autograd.backward', 'scaled', 'skipped'])
def test_every_way_to_run_the_backward_settles_as_mmcv_ddp_trains(single_rank_group,
                                                                  backward, settled):
    """head_b, unreached, is completed in each backward (else DDP raises "Expected to have
    finished reduction" at the next forward) and left with grad None, as DDP's graph search
    leaves it; a skipped backward is no error."""
    model = _build(Config(dict()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        _step(model, optimizer, False, backward)
        assert model.module.head_b.weight.grad is None
    _step(model, optimizer, True, torch.Tensor.backward)
    assert model.module.head_b.weight.grad is not None
    assert model.completion.iterations_ended == settled


def test_a_model_that_runs_its_own_backward_is_told_why_mmcv_ddp_cannot_train_it(
        single_rank_group):
    """Plain mmcv DDP fails on it within three steps, in both modes; the guard stops at the
    end of the first such backward, naming the model and the fix."""
    for find_unused_parameters in (False, True):
        plain = _build(Config(dict(ddp_guard=dict(enabled=False))), model=OwnBackward(),
                       find_unused_parameters=find_unused_parameters)
        optimizer = torch.optim.SGD(plain.parameters(), lr=0.1)
        with pytest.raises(RuntimeError, match='initialize_buckets|mark a variable ready'):
            for _ in range(3):
                _step(plain, optimizer, True, lambda loss: None)
    guarded = _build(Config(dict()), model=OwnBackward())
    with pytest.raises(RuntimeError) as raised:
        _step(guarded, torch.optim.SGD(guarded.parameters(), lr=0.1), True, lambda loss: None)
    assert str(raised.value).startswith('mmdet3d_ddp_guard: OwnBackward.train_step ran a '
                                        'backward itself.')
    assert 'Fix: return the loss from train_step' in str(raised.value)


def test_a_comm_hook_of_ones_own_is_taken_in_every_mode_once_as_by_ddp(single_rank_group):
    """The training itself: tests/test_comm_hooks.py, in this leg against mmcv's wrapper."""
    for config in (dict(), dict(find_unused_parameters=False),
                   dict(find_unused_parameters=True)):
        model = _build(Config(config))
        model.register_comm_hook(None, _allreduce)
        with pytest.raises(RuntimeError, match='^register_comm_hook or '
                                               'register_builtin_comm_hook can only be called '
                                               'once.$'):
            model.register_comm_hook(None, _allreduce)


def _allreduce(state, bucket):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    return allreduce_hook(None, bucket)


def _bev_batch():
    """Two samples as a BEV codebase's pipeline makes them: six camera images stacked,
    metas on the CPU only, boxes per sample; collated by mmcv for one device."""
    samples = [dict(img=DataContainer(torch.rand(6, 3, 8, 8), stack=True),
                    img_metas=DataContainer(dict(index=i), cpu_only=True),
                    gt_bboxes=DataContainer(torch.rand(i + 1, 4)))
               for i in range(2)]
    return collate(samples, samples_per_gpu=2)


class CameraShapes(TwoHeads):
    def train_step(self, data, optimizer):
        batch, cameras, channels, height, width = data['img'].shape  # BEVFormer's unpacking
        assert [meta['index'] for meta in data['img_metas']] == [0, 1]
        assert [boxes.shape[0] for boxes in data['gt_bboxes']] == [1, 2]
        loss = self.head_a(data['img'].mean(dim=(1, 3, 4))).mean()
        return dict(loss=loss, log_vars=dict(loss=loss.item()), num_samples=batch)


def test_the_cpu_path_hands_the_model_what_the_gpu_path_does(single_rank_group):
    """mmcv-full 1.4.0 to 1.4.3's CPU scatter adds a leading dimension to every
    DataContainer chunk (mmcv 1.4.0's _functions.scatter: ``output.unsqueeze(0)`` when
    ``devices == [-1]``); the adapter does not use it. Where the installed mmcv's scatter is
    right (1.4.4 and later), both give the same, and a BEV detector's five-dimensional
    images reach it whole through both wrappers."""
    batch = _bev_batch()
    inputs, kwargs = scatter_kwargs((batch, ), {}, [-1])
    ours = unwrap_for_one_device((batch, ))
    assert ours[0].keys() == inputs[0][0].keys()
    assert torch.equal(ours[0]['img'], inputs[0][0]['img'])
    assert ours[0]['img'].shape == (2, 6, 3, 8, 8)
    assert ours[0]['img_metas'] == inputs[0][0]['img_metas']
    for config in (dict(), dict(ddp_guard=dict(enabled=False))):
        model = _build(Config(config), model=CameraShapes())
        model.train_step(batch, None)['loss'].backward()


class _PhaseOnSave(nn.Linear):
    """Notes the stall guard's phase while mmcv's save_checkpoint reads its weights."""

    def __init__(self, position):
        super().__init__(2, 2)
        self.position, self.phases = position, []
        # mmcv's get_state_dict runs a module's state-dict hooks, not its state_dict.
        self._register_state_dict_hook(
            lambda module, state, prefix, local: self.phases.append(position.phase))

    def train_step(self, data, optimizer):  # what mmcv's runners require of a model
        raise NotImplementedError


def test_the_checkpoint_phase_is_published_while_mmcv_saves(tmp_path, single_rank_group):
    """mmcv's own IterBasedRunner and save_checkpoint, with the wrapper's watchdog: the
    rank's phase is 'checkpoint' while the file is written, and what it was before once
    written; the run's end stops the watchdog."""
    import logging

    import torch.distributed as dist
    from mmcv.runner import IterBasedRunner

    from mmdet3d_ddp_guard.stall_guard import RankPosition, StallWatchdog
    from mmdet3d_ddp_guard.stall_guard.store_protocol import KEY_PREFIX, StallStore
    from mmdet3d_ddp_guard.openmmlab1.stall_phase_hook import StallPhaseHook

    position = RankPosition(nn.Linear(2, 2))
    position.enter('optimizer step')
    model = _PhaseOnSave(position)
    runner = IterBasedRunner(model, work_dir=str(tmp_path), logger=logging.getLogger('t'))
    store = dist.PrefixStore(KEY_PREFIX + 'phase/', dist.distributed_c10d._get_default_store())
    watchdog = StallWatchdog(position, 30, lambda text, error: None,
                             StallStore(store, 0, [0]), blocking=True, lines=MMCV1_LINES)
    watchdog.start()
    StallPhaseHook(watchdog).attach(runner)
    runner.save_checkpoint(str(tmp_path), create_symlink=False)
    assert model.phases == ['checkpoint']
    assert position.phase == 'optimizer step'
    assert torch.load(tmp_path / 'iter_1.pth')['state_dict'].keys() == {'weight', 'bias'}
    runner.call_hook('after_run')
    assert watchdog.stopped
