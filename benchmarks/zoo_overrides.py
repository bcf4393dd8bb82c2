"""How the zoo run treats each of mmdet3d's configs: skip it (and why), point it at the tiny
data, and shrink it for 2 CPU cores without changing the model's parameters or code paths.

Everything here works on the merged config (``mmengine.Config.fromfile`` of mmdet3d's own
file, inheritance resolved), so one rule covers every config that uses a component, whatever
folder it sits in. ``shrink`` returns the list of what it changed; that list is the row's
``shrunk``.
"""
import copy
import os.path as osp
import re
from typing import Dict, Iterator, List, Optional, Tuple

# Registered types whose forward needs an op that mmcv 2.1.0 (or a package not installed
# here) only has for CUDA. The first one found in the model names the row's reason.
_SPARSE = ('sparse convolution (mmcv 2.1.0: "get_indice_pairs is not implemented on CPU")')
_SCATTER = 'DynamicScatter (mmcv 2.1.0 has no CPU kernel)'
_POINTNET = ('the PointNet++ point ops (furthest_point_sample, ball_query, gather/group '
             'points: CUDA only in mmcv 2.1.0)')
CUDA_ONLY_TYPES = {
    'SparseEncoder': _SPARSE,
    'SparseEncoderSASSD': _SPARSE,
    'SparseUNet': _SPARSE,
    'Asymm3DSpconv': _SPARSE,
    'DynamicVFE': _SCATTER,
    'DynamicSimpleVFE': _SCATTER,
    'DynamicPillarFeatureNet': _SCATTER,
    'SegVFE': _SCATTER,
    'PointNet2SASSG': _POINTNET,
    'PointNet2SAMSG': _POINTNET,
    'DGCNNBackbone': 'DGCNN\'s graph feature ops (knn, group points: CUDA only in mmcv 2.1.0)',
    'MinkResNet': 'MinkowskiEngine (not installed; its sparse convolution is CUDA-first)',
    'SPVCNNBackbone': 'torchsparse (not installed; CUDA only)',
    'RotatedIoU3DLoss': 'diff_iou_rotated (rotated 3D IoU loss: CUDA only in mmcv 2.1.0)',
}
_MINKUNET_BACKENDS = {
    'torchsparse': 'torchsparse (not installed; CUDA only)',
    'minkowski': 'MinkowskiEngine (not installed; its sparse convolution is CUDA-first)',
    'spconv': _SPARSE,
}

# Dataset class -> the tiny dataset (folder under the zoo's data root) that holds its format.
TINY_DATASETS = {
    'KittiDataset': 'kitti',
    'NuScenesDataset': 'nuscenes',
    'LyftDataset': 'lyft',
    'WaymoDataset': 'waymo',
    'SUNRGBDDataset': 'sunrgbd',
}
_WRAPPERS = ('RepeatDataset', 'CBGSDataset', 'ClassBalancedDataset', 'ConcatDataset')

#: Images are resized to this fraction of the config's size (each side): the image models
#: are ResNet-101 / DLA-34 at full resolution, tens of seconds a step on 2 cores.
IMAGE_FACTOR = 0.5
#: Pipeline steps whose image size keys are scaled.
_SIZE_KEYS = ('scale', 'img_scale', 'scales')


def walk_types(node, path: str = '') -> Iterator[Tuple[str, str]]:
    """(key path, registered type name without scope) of every ``type=...`` in a config
    tree, depth first, in the config's order."""
    if isinstance(node, dict):
        kind = node.get('type')
        if isinstance(kind, str):
            yield path, kind.split('.')[-1]
        for key, value in node.items():
            yield from walk_types(value, f'{path}.{key}' if path else str(key))
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from walk_types(value, f'{path}[{index}]')


def cuda_only_reasons(cfg) -> List[str]:
    """Why the config cannot train on a CPU here: one line per CUDA-only component."""
    reasons = []
    model = cfg.get('model') or {}
    for path, kind in walk_types(model, 'model'):
        if kind in CUDA_ONLY_TYPES:
            reasons.append(f'{kind} at {path}: {CUDA_ONLY_TYPES[kind]}')
        elif kind == 'ImVoxelHead':
            # Its default box loss (not written in the configs) is the rotated IoU loss.
            node = _get_path(model, path[len('model.'):]) or {}
            loss = (node.get('bbox_loss') or {}).get('type', 'RotatedIoU3DLoss')
            if loss.split('.')[-1] == 'RotatedIoU3DLoss':
                reasons.append(f'ImVoxelHead at {path}, whose default bbox_loss is '
                               f'RotatedIoU3DLoss: {CUDA_ONLY_TYPES["RotatedIoU3DLoss"]}')
        elif kind == 'MinkUNetBackbone':
            node = _get_path(model, path[len('model.'):])
            backend = (node or {}).get('sparseconv_backend', 'torchsparse')
            reasons.append(f'MinkUNetBackbone at {path} with sparseconv_backend='
                           f'{backend!r}: {_MINKUNET_BACKENDS.get(backend, _SPARSE)}')
    optim = cfg.get('optim_wrapper') or {}
    if optim.get('type') == 'AmpOptimWrapper':
        reasons.append("optim_wrapper AmpOptimWrapper: MMEngine's mixed precision asserts a "
                       'GPU')
    return list(dict.fromkeys(reasons))


def _get_path(node, path: str):
    for part in re.findall(r'[^.\[\]]+', path):
        node = node[int(part)] if isinstance(node, list) else node.get(part)
    return node


def train_datasets(dataloader_dataset) -> Iterator[dict]:
    """The dataset dicts inside the wrappers (RepeatDataset, CBGSDataset, ConcatDataset)."""
    node = dataloader_dataset
    if isinstance(node, dict) and node.get('type', '').split('.')[-1] in _WRAPPERS:
        inner = node.get('dataset', node.get('datasets'))
        for item in (inner if isinstance(inner, list) else [inner]):
            yield from train_datasets(item)
    elif isinstance(node, dict):
        yield node


def dataset_types(cfg) -> List[str]:
    loader = cfg.get('train_dataloader') or {}
    return [d.get('type', '').split('.')[-1] for d in train_datasets(loader.get('dataset'))]


def preflight(cfg) -> Optional[Tuple[str, str]]:
    """(status, reason) when the config is not run at all, else None."""
    reasons = cuda_only_reasons(cfg)
    if reasons:
        return 'skipped', 'CUDA only: ' + '; '.join(reasons)
    if not cfg.get('train_dataloader') and cfg.get('data'):
        return 'limitation', (
            "mmdet3d 1.4.0 ships this config in MMDetection 2.x's format (`data = "
            'dict(samples_per_gpu=...)`, no `train_dataloader`): MMEngine cannot build its '
            'data, so it cannot train with mmdet3d 1.4 at all')
    broken = broken_train_pipeline(cfg)
    if broken:
        return 'limitation', broken
    missing = [t for t in dataset_types(cfg) if t not in TINY_DATASETS]
    if missing:
        return 'pending', f'no tiny data for {", ".join(missing)} yet'
    return None


def broken_train_pipeline(cfg) -> Optional[str]:
    """Why mmdet3d 1.4.0 cannot train the config on any data, read from its train
    pipeline; None when nothing is wrong there."""
    from mmdet3d.registry import TRANSFORMS
    from mmdet3d.utils import register_all_modules
    register_all_modules(init_default_scope=True)
    loader = cfg.get('train_dataloader') or {}
    for dataset in train_datasets(loader.get('dataset')):
        for step in dataset.get('pipeline') or []:
            kind = step.get('type', '')
            if isinstance(kind, str) and TRANSFORMS.get(kind) is None:
                return (f'mmdet3d 1.4.0 ships this config with the train pipeline step '
                        f'{kind!r}, which mmdet3d 1.x no longer registers (a 0.x step), so '
                        'its dataset cannot be built on any data')
            packs_labels = 'gt_labels_3d' in (step.get('keys') or [])
            if (kind.split('.')[-1] == 'Pack3DDetInputs' and not packs_labels
                    and dataset.get('filter_empty_gt', True)):
                return ('mmdet3d 1.4.0 ships this config with a train pipeline whose '
                        f'Pack3DDetInputs keeps only {step.get("keys")}: no gt_labels_3d, '
                        "so Det3DDataset's empty-box filter raises AttributeError "
                        "('InstanceData' object has no attribute 'labels_3d') on any data")
    return None


# ---------------------------------------------------------------------------------------
# Shrinking and data pointing


def _scaled(size, factor: float):
    if isinstance(size, (list, tuple)) and size and isinstance(size[0], (list, tuple)):
        return [_scaled(s, factor) for s in size]
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(
            isinstance(v, (int, float)) for v in size):
        return tuple(max(32, int(round(v * factor))) for v in size)
    return size


def _shrink_pipeline(steps: List[dict], factor: float, changes: List[str]) -> List[dict]:
    out = []
    for step in steps:
        kind = step.get('type', '').split('.')[-1]
        if kind == 'ObjectSample':
            changes.append('ObjectSample removed (no ground-truth database in the tiny data)')
            continue
        step = dict(step)
        for key in _SIZE_KEYS:
            if key in step and factor != 1:
                new = _scaled(step[key], factor)
                if new != step[key]:
                    changes.append(f'{kind}.{key} {_fmt(step[key])} -> {_fmt(new)}')
                    step[key] = new
        for key in ('transforms', 'img_transforms'):
            if isinstance(step.get(key), list):
                step[key] = _shrink_pipeline(step[key], factor, changes)
        out.append(step)
    return out


def _fmt(size) -> str:
    return str(tuple(size) if isinstance(size, list) and len(size) == 2
               and not isinstance(size[0], (list, tuple)) else size).replace(' ', '')


def _strip_pretrained(node, changes: List[str], path: str = 'model') -> None:
    """No downloads: ``init_cfg=dict(type='Pretrained', ...)`` and ``pretrained=...`` go."""
    if isinstance(node, dict):
        init = node.get('init_cfg')
        if isinstance(init, dict) and init.get('type') == 'Pretrained':
            node['init_cfg'] = None
            changes.append(f'{path}.init_cfg Pretrained dropped (no download)')
        if isinstance(node.get('pretrained'), str):
            node['pretrained'] = None
            changes.append(f'{path}.pretrained dropped (no download)')
        for key, value in node.items():
            _strip_pretrained(value, changes, f'{path}.{key}')
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _strip_pretrained(value, changes, f'{path}[{index}]')


def shrink(cfg, data_root: str, image_factor: float = IMAGE_FACTOR,
           max_iters: int = 2) -> List[str]:
    """Points ``cfg`` (changed in place) at the tiny data under ``data_root`` and makes it
    cheap; returns what was changed (the row's ``shrunk``). Model parameters stay as the
    config builds them."""
    changes: List[str] = []
    loader = cfg.train_dataloader
    for dataset in train_datasets(loader.dataset):
        kind = dataset.get('type', '').split('.')[-1]
        dataset['data_root'] = osp.join(data_root, TINY_DATASETS[kind]) + '/'
        if 'pipeline' in dataset:
            dataset['pipeline'] = _shrink_pipeline(dataset['pipeline'], image_factor,
                                                   changes)
        if dataset.get('load_interval', 1) != 1:
            changes.append(f'load_interval {dataset["load_interval"]} -> 1 (8 tiny frames)')
            dataset['load_interval'] = 1
    if loader.get('batch_size', 1) != 1:
        changes.append(f'batch_size {loader.batch_size} -> 1 per rank')
    loader.update(batch_size=1, num_workers=0, persistent_workers=False)
    _shrink_model(cfg, changes)
    _strip_pretrained(cfg.model, changes)
    if cfg.get('load_from'):
        changes.append('load_from dropped (no download)')
    cfg.load_from = None
    cfg.resume = False
    # A short iteration-based run at the schedule's base learning rate, no evaluation.
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters)
    cfg.param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
    for key in ('val_dataloader', 'val_cfg', 'val_evaluator', 'test_dataloader', 'test_cfg',
                'test_evaluator'):
        cfg[key] = None
    hooks = dict(cfg.get('default_hooks') or {})
    hooks.update(logger=dict(type='LoggerHook', interval=1),
                 checkpoint=dict(type='CheckpointHook', interval=100000, by_epoch=False))
    hooks.pop('visualization', None)
    cfg.default_hooks = hooks
    cfg.log_processor = dict(by_epoch=False)
    cfg.randomness = dict(seed=0)
    cfg.auto_scale_lr = dict(enable=False, base_batch_size=16)
    return list(dict.fromkeys(changes))


#: Per model type: (key path inside cfg.model, new value, why) for models too slow on
#: 2 cores even with smaller images. Only sizes of activations, never of parameters.
MODEL_SHRINKS = {
    # ImVoxelNet: the 3D voxel volume is 216 x 248 x 12; a quarter of it in x and y keeps
    # every layer (the 3D neck's convolutions do not depend on the grid size).
    'ImVoxelNet': [('n_voxels', [54, 62, 12], 'voxel volume 216x248x12 -> 54x62x12')],
    # MultiViewDfM: 0.5 m voxels make a 220 x 300 x 12 volume of 64 channels; 2 m ones in x
    # and y keep z (12 cells, which OutdoorImVoxelNeck reduces to 1) and every layer.
    'MultiViewDfM': [('voxel_size', (2.0, 2.0, 0.5),
                      'voxel size (0.5, 0.5, 0.5) -> (2.0, 2.0, 0.5): volume 220x300x12 -> '
                      '55x75x12')],
}

#: Image factor per family where the default is too slow: several cameras per sample
#: (MV-FCOS3D), or a ResNet-101 on nuScenes' and Waymo's large images (FCOS3D, PGD: a
#: quarter of each side still leaves cells on every FPN level, down to stride 128).
FAMILY_IMAGE_FACTORS = {'mvfcos3d': 0.25, 'fcos3d': 0.25, 'pgd': 0.25}


def image_factor_for(config: str) -> float:
    return FAMILY_IMAGE_FACTORS.get(config.split('/')[0], IMAGE_FACTOR)


def _shrink_model(cfg, changes: List[str]) -> None:
    kind = str(cfg.model.get('type', '')).split('.')[-1]
    for key, value, why in MODEL_SHRINKS.get(kind, ()):
        if key in cfg.model:
            cfg.model[key] = copy.deepcopy(value)
            changes.append(why)


def guard_lines(cfg) -> None:
    """The three config lines of the README, plus ``find_unused_parameters = 'auto'`` so
    that GuardedDDP chooses rather than honouring an inherited True."""
    imports = list((cfg.get('custom_imports') or {}).get('imports', []))
    cfg.custom_imports = dict(imports=list(dict.fromkeys(imports + ['mmdet3d_ddp_guard'])),
                              allow_failed_imports=False)
    cfg.model_wrapper_cfg = dict(type='GuardedDDP')
    cfg.find_unused_parameters = 'auto'
    hooks = [h for h in (cfg.get('custom_hooks') or [])
             if h.get('type') != 'UnusedParamsHook']
    cfg.custom_hooks = hooks + [dict(type='UnusedParamsHook', interval=1)]
