"""Running mmcv 1.x's ``launcher='pytorch'`` training under torchrun on a machine without
CUDA (the tests, CI, a laptop): steps of the launch path that refuse the CPU, none in the
model.

- ``mmcv.runner.init_dist`` calls ``torch.cuda.set_device`` before it creates the process
  group. :func:`allow_cpu_training` (called by :mod:`.import_changes` when this package is
  imported without CUDA, by ``custom_imports`` while the config is read, before
  ``init_dist``) makes it create a gloo group instead.
- mmdet 2.x's ``build_ddp`` asserts that the device is ``'cuda'``, ``'mlu'`` or ``'npu'``;
  without CUDA (``cfg.device = get_device()`` is ``'cpu'``) it is let through to the same
  ``MMDistributedDataParallel`` on the CPU module; and its samplers' ``sync_random_seed``
  broadcasts a CUDA tensor, which goes on the CPU instead. Both where mmdet is installed.

Where CUDA is available nothing changes.
"""
import functools
import importlib
import inspect
import logging

import torch
from mmcv.parallel import DataContainer, MMDistributedDataParallel
from mmcv.utils import print_log
from torch.nn.parallel import DistributedDataParallel

from ..environment.cpu_ddp import drop_device_ids_for_cpu_module, init_gloo_group

_DDP_SIGNATURE = inspect.signature(DistributedDataParallel.__init__)


def ddp_arguments(module, args, kwargs) -> dict:
    """What a caller passed to ``MMDistributedDataParallel(module, ...)``, by name (scripts
    pass ``device_ids`` by position too)."""
    arguments = _DDP_SIGNATURE.bind(None, module, *args, **kwargs).arguments
    del arguments['self'], arguments['module']
    return arguments


class CPUCompatibleMMDistributedDataParallel(MMDistributedDataParallel):
    """mmcv's ``MMDistributedDataParallel``, unchanged, except for a module on the CPU: no
    ``device_ids`` (mmdet's ``build_ddp`` passes ``[LOCAL_RANK]``, which DDP refuses there),
    and the DataContainer inputs of ``train_step``, ``val_step`` and ``forward`` (the
    evaluation hooks' test) unwrapped (:func:`unwrap_for_one_device`; mmcv's DDP hands them
    to the model as they are when it has no device ids). What
    ``ddp_guard = dict(enabled=False)`` builds on a machine without CUDA: plain DDP, to
    compare against."""

    def __init__(self, module, *args, **kwargs):
        arguments = ddp_arguments(module, args, kwargs)
        message = drop_device_ids_for_cpu_module(module, arguments)
        if message:
            print_log(message, logger='mmcv', level=logging.WARNING)
        super().__init__(module, **arguments)

    def train_step(self, *inputs, **kwargs):
        if not self.device_ids:
            inputs, kwargs = unwrap_for_one_device(inputs), unwrap_for_one_device(kwargs)
        return super().train_step(*inputs, **kwargs)

    def val_step(self, *inputs, **kwargs):
        if not self.device_ids:
            inputs, kwargs = unwrap_for_one_device(inputs), unwrap_for_one_device(kwargs)
        return super().val_step(*inputs, **kwargs)

    def forward(self, *inputs, **kwargs):
        # mmdet's multi_gpu_test (DistEvalHook) calls the wrapper itself.
        if not self.device_ids:
            inputs, kwargs = unwrap_for_one_device(inputs), unwrap_for_one_device(kwargs)
        return super().forward(*inputs, **kwargs)


def unwrap_for_one_device(obj):
    """What mmcv's ``scatter`` hands the one device of a run: each DataContainer's first
    chunk, in containers of the same types; anything else as it is.

    Not mmcv's own CPU path (``scatter(..., [-1])``): that differs between versions.
    mmcv-full 1.4.0 to 1.4.3 (1.4.0 is the BEV codebases' pin) unsqueeze every DataContainer
    chunk on the CPU, so that a detector unpacking ``B, N, C, H, W = img.shape`` fails with
    "too many values to unpack"; 1.4.4 and later do not. This gives what the GPU path
    gives, on every mmcv 1.x.
    """
    if isinstance(obj, DataContainer):
        return obj.data[0]
    if isinstance(obj, dict):
        return type(obj)((key, unwrap_for_one_device(value)) for key, value in obj.items())
    if isinstance(obj, (list, tuple)) and not hasattr(obj, '_fields'):
        return type(obj)(unwrap_for_one_device(item) for item in obj)
    return obj


def allow_cpu_training() -> None:
    """Makes the three steps above take the CPU, where CUDA is not available (each once:
    a wrapped function is marked ``ddp_guard_cpu_aware``)."""
    if torch.cuda.is_available():
        return
    _allow_cpu_init_dist()
    _allow_cpu_build_ddp()
    _allow_cpu_seed_sync()


def _allow_cpu_init_dist() -> None:
    import mmcv.runner.dist_utils as mmcv_dist
    original = mmcv_dist._init_dist_pytorch
    if getattr(original, 'ddp_guard_cpu_aware', False):
        return

    @functools.wraps(original)
    def init_dist_pytorch(backend, **kwargs):
        print_log(init_gloo_group(backend, **kwargs), logger='mmcv')

    init_dist_pytorch.ddp_guard_cpu_aware = True
    mmcv_dist._init_dist_pytorch = init_dist_pytorch


def _allow_cpu_build_ddp() -> None:
    def cpu_aware(original, distribution):
        def build_ddp(model, device='cuda', *args, **kwargs):
            if device != 'cpu':
                return original(model, device, *args, **kwargs)
            return distribution.ddp_factory['cuda'](model, *args, **kwargs)
        return build_ddp

    _rebind('mmdet.utils.util_distribution', 'build_ddp', cpu_aware,
            ('mmdet.utils', 'mmdet.apis.train'))


def _allow_cpu_seed_sync() -> None:
    """mmdet 2.x's samplers agree on their seed with a broadcast of a CUDA tensor."""
    def cpu_aware(original, _):
        def sync_random_seed(seed=None, device='cuda'):
            return original(seed, 'cpu' if device == 'cuda' else device)
        return sync_random_seed

    _rebind('mmdet.core.utils.dist_utils', 'sync_random_seed', cpu_aware,
            ('mmdet.core.utils', 'mmdet.datasets.samplers.distributed_sampler',
             'mmdet.datasets.samplers.infinite_sampler',
             'mmdet.datasets.samplers.class_aware_sampler'))


def _rebind(defining: str, name: str, cpu_aware, importers) -> None:
    """Replaces mmdet's function ``defining.name`` with ``cpu_aware(original, module)``
    there and in the modules that imported it by name; nothing where mmdet (or that
    function) is not installed."""
    try:
        module = importlib.import_module(defining)
    except ImportError:
        return
    original = getattr(module, name, None)
    if original is None or getattr(original, 'ddp_guard_cpu_aware', False):
        return
    replacement = functools.wraps(original)(cpu_aware(original, module))
    replacement.ddp_guard_cpu_aware = True
    for user in (defining, ) + tuple(importers):
        try:
            user_module = importlib.import_module(user)
        except ImportError:
            continue
        if getattr(user_module, name, None) is original:
            setattr(user_module, name, replacement)
