"""A train script written for the tests, shaped like BEVFormer's/UniAD's ``tools/train.py``.

    PYTHONPATH=<repo> TINY_COCO_ROOT=<data> python tests/openmmlab1/projects/train.py \
        tests/openmmlab1/projects/configs/plugin_tiny_retinanet_branch.py \
        --work-dir DIR [--launcher none|pytorch] [--cfg-options k=v ...]

Distributed: ``python -m torch.distributed.run --nproc_per_node 2 <this file> CONFIG
--launcher pytorch`` calls ``init_dist('pytorch', **cfg.dist_params)`` (the configs say
``backend='gloo'``) and trains with the plugin's ``MMDistributedDataParallel``.

The plugin package ``tests.openmmlab1.projects.mmdet3d_plugin`` is imported BEFORE the
config is read (so before the config's ``custom_imports``); ``--plugin-after-config``
instead imports ``cfg.plugin_dir`` after ``Config.fromfile``, the literal BEVFormer order.
The repository root is put on ``sys.path`` (the codebases rely on PYTHONPATH for that).
"""
import argparse
import copy
import importlib
import os
import os.path as osp
import sys
import time

REPO = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import mmcv  # noqa: E402
from mmcv import Config, DictAction  # noqa: E402
from mmcv.runner import get_dist_info, init_dist  # noqa: E402
from mmdet import __version__ as mmdet_version  # noqa: E402
from mmdet.apis import set_random_seed  # noqa: E402
from mmdet.datasets import build_dataset  # noqa: E402
from mmdet.models import build_detector  # noqa: E402
from mmdet.utils import collect_env, get_root_logger  # noqa: E402

PLUGIN = 'tests.openmmlab1.projects.mmdet3d_plugin'


def parse_args():
    parser = argparse.ArgumentParser(description='Train a detector (plugin codebase shape)')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument('--resume-from', help='the checkpoint file to resume from')
    parser.add_argument('--no-validate', action='store_true',
                        help='whether not to evaluate the checkpoint during training')
    parser.add_argument('--seed', type=int, default=0, help='random seed')
    parser.add_argument('--deterministic', action='store_true')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override some settings in the used config, key=value')
    parser.add_argument('--launcher', choices=['none', 'pytorch'], default='none',
                        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    parser.add_argument('--plugin-after-config', action='store_true',
                        help='import cfg.plugin_dir after reading the config (BEVFormer '
                             'order) instead of the plugin package before it')
    args = parser.parse_args()
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def import_plugin_dir(plugin_dir):
    """'a/b/c/' -> import a.b.c, as the codebases turn ``plugin_dir`` into a module."""
    return importlib.import_module('.'.join(osp.normpath(plugin_dir).split(os.sep)))


def main():
    args = parse_args()
    if not args.plugin_after_config:
        importlib.import_module(PLUGIN)

    cfg = Config.fromfile(args.config)
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.plugin_after_config and cfg.get('plugin', False):
        import_plugin_dir(cfg.plugin_dir)
    from tests.openmmlab1.projects.mmdet3d_plugin.apis import custom_train_detector

    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    if args.resume_from is not None:
        cfg.resume_from = args.resume_from
    cfg.gpu_ids = range(1)

    if args.launcher == 'none':
        distributed = False
    else:
        distributed = True
        init_dist(args.launcher, **cfg.dist_params)
        _, world_size = get_dist_info()
        cfg.gpu_ids = range(world_size)

    mmcv.mkdir_or_exist(osp.abspath(cfg.work_dir))
    cfg.dump(osp.join(cfg.work_dir, osp.basename(args.config)))
    timestamp = time.strftime('%Y%m%d_%H%M%S', time.localtime())
    log_file = osp.join(cfg.work_dir, '%s.log' % timestamp)
    logger = get_root_logger(log_file=log_file, log_level=cfg.log_level)

    meta = dict()
    env_info = '\n'.join('%s: %s' % (k, v) for k, v in collect_env().items())
    meta['env_info'] = env_info
    meta['config'] = cfg.pretty_text
    logger.info('Distributed training: %s' % distributed)
    logger.info('Config:\n%s' % cfg.pretty_text)

    logger.info('Set random seed to %d, deterministic: %s' % (args.seed, args.deterministic))
    set_random_seed(args.seed, deterministic=args.deterministic)
    cfg.seed = args.seed
    meta['seed'] = args.seed
    meta['exp_name'] = osp.basename(args.config)

    model = build_detector(cfg.model, train_cfg=cfg.get('train_cfg'),
                           test_cfg=cfg.get('test_cfg'))
    model.init_weights()
    logger.info('Model:\n%s' % model)

    datasets = [build_dataset(cfg.data.train)]
    if len(cfg.workflow) == 2:
        val_dataset = copy.deepcopy(cfg.data.val)
        val_dataset.pipeline = cfg.data.train.pipeline
        datasets.append(build_dataset(val_dataset))
    if cfg.checkpoint_config is not None:
        cfg.checkpoint_config.meta = dict(mmdet_version=mmdet_version,
                                          CLASSES=datasets[0].CLASSES)
    model.CLASSES = datasets[0].CLASSES
    custom_train_detector(model, datasets, cfg, distributed=distributed,
                          validate=(not args.no_validate), timestamp=timestamp, meta=meta)


if __name__ == '__main__':
    main()
