"""Resuming from MMEngine's checkpoints with torch's weights-only loading left on: importing
mmdet3d_ddp_guard allows exactly the globals those checkpoints hold, and nothing else, while
MMEngine loads a checkpoint (``CheckpointLoader.load_checkpoint``) and nowhere else."""
import os
import pickle

import numpy as np
import pytest
import torch
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.runner.checkpoint import CheckpointLoader

from mmdet3d_ddp_guard.openmmlab2 import checkpoint_safe_globals
from tests.scenarios import train_toy_runner


@pytest.fixture
def weights_only_default(monkeypatch):
    """torch.load's own default: no environment variable turns weights-only off."""
    monkeypatch.delenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', raising=False)
    monkeypatch.delenv('TORCH_FORCE_WEIGHTS_ONLY_LOAD', raising=False)


def _registered_names():
    names = set()
    for item in checkpoint_safe_globals.mmengine_checkpoint_globals():
        if isinstance(item, tuple):
            names.add(item[1])
        elif not isinstance(item, type) or not issubclass(item, type(torch.float64)):
            names.add(f'{item.__module__}.{item.__qualname__}')
    return names


def _allowed_now() -> set:
    return set(torch.serialization.get_safe_globals())


def test_resume_with_weights_only_loading(tmp_path, weights_only_default):
    work_dir = str(tmp_path)
    train_toy_runner(0, 1, work_dir, 'skip_odd', max_iters=4, checkpoint_interval=2)
    checkpoint = os.path.join(work_dir, 'iter_4.pth')
    # What a real Runner checkpoint holds beyond weights-only loading's defaults is exactly
    # what the package allows (the numpy dtype classes are built, not named, in the file).
    allowed = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(checkpoint))
    finally:
        torch.serialization.add_safe_globals(allowed)
    assert unsafe == _registered_names() - {'numpy.dtypes.Float64DType',
                                            'numpy.dtypes.Int64DType'}
    # Allowed while MMEngine loads, as here, only.
    with checkpoint_safe_globals.mmengine_checkpoint_globals_allowed():
        loaded = torch.load(checkpoint, weights_only=True)
    assert not _allowed_now() & set(checkpoint_safe_globals.mmengine_checkpoint_globals())
    assert isinstance(loaded['message_hub']['log_scalars']['train/loss'], HistoryBuffer)
    resumed = train_toy_runner(0, 1, work_dir, 'skip_odd', max_iters=6,
                               checkpoint_interval=2, resume=True)
    assert [line['iter'] for line in resumed['lines']] == list(range(6))
    assert resumed['statistics']['iterations_seen'] == 6
    # Not left in torch's allowlist by the resume either.
    assert not _allowed_now() & set(checkpoint_safe_globals.mmengine_checkpoint_globals())
    # HistoryBuffer's statistics came back from the checkpoint through the restricted getattr.
    with checkpoint_safe_globals.mmengine_checkpoint_globals_allowed():
        hub = torch.load(os.path.join(work_dir, 'iter_6.pth'), weights_only=True)['message_hub']
    assert hub['log_scalars']['train/loss'].mean() > 0


@pytest.mark.parametrize('obj, words', [
    (HistoryBuffer.__init__, r"refuses getattr\(.*HistoryBuffer.*'__init__'\)"),
    (np.save, 'Unsupported global: GLOBAL numpy.save'),
    # Only the dtypes of HistoryBuffer's arrays.
    (np.zeros(2, dtype=np.float32), 'Float32DType'),
])
def test_anything_else_is_still_refused(tmp_path, weights_only_default, obj, words):
    path = str(tmp_path / 'payload.pth')
    torch.save(dict(payload=obj), path)
    with pytest.raises(pickle.UnpicklingError, match=words), \
            checkpoint_safe_globals.mmengine_checkpoint_globals_allowed():
        torch.load(path, weights_only=True)


def test_older_torch_is_left_alone(monkeypatch):
    """Before torch 2.6, torch.load defaults to weights_only=False: nothing to allow."""
    monkeypatch.setattr(torch, '__version__', '2.5.1')
    added = []
    monkeypatch.setattr(torch.serialization, 'add_safe_globals', added.append)
    # MMEngine's own loader, as the import would have found it on such a torch.
    loader = CheckpointLoader.__dict__['load_checkpoint']
    unwrapped = classmethod(getattr(loader.__func__, '__wrapped__', loader.__func__))
    monkeypatch.setattr(CheckpointLoader, 'load_checkpoint', unwrapped)
    assert checkpoint_safe_globals.allow_mmengine_checkpoint_globals() is False
    assert added == []
    assert CheckpointLoader.__dict__['load_checkpoint'] is unwrapped
