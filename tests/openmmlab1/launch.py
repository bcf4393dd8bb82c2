"""The OpenMMLab 1.x training scripts the tests launch under torchrun
(:func:`demo.launch.torchrun_train` with ``script=``), and their data."""
import os.path as osp

import mmdet

from demo.launch import torchrun_train
from tests.openmmlab1.tiny_coco import make_tiny_coco

HERE = osp.dirname(osp.abspath(__file__))
#: mmdet 2.x's own tools/train.py, as its package ships it (.mim/tools).
MMDET_TRAIN = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools', 'train.py')
#: The codebase-shaped plugin's train script (BEVFormer's shape).
PLUGIN_TRAIN = osp.join(HERE, 'projects', 'train.py')
CONFIGS = osp.join(HERE, 'configs')
PLUGIN_CONFIGS = osp.join(HERE, 'projects', 'configs')


def train(script: str, config: str, work_dir: str, data_root: str, nproc: int = 2,
          cfg_options=(), timeout: float = 240):
    """One torchrun of ``script CONFIG`` on ``nproc`` gloo ranks over the tiny COCO data at
    ``data_root`` (made when missing); ``torchrun_train`` makes the repository importable
    (custom_imports)."""
    if not osp.isdir(osp.join(data_root, 'annotations')):
        make_tiny_coco(data_root)
    # Unbuffered: Python before 3.9 block-buffers a non-interactive stderr, so two ranks
    # that raise at once would interleave their tracebacks in torchrun's shared stderr at
    # any byte (seen in CI: a rank's error class cut in two); unbuffered, each line of a
    # traceback is one write, whole.
    env = dict(TINY_COCO_ROOT=data_root.rstrip('/') + '/', PYTHONUNBUFFERED='1')
    return torchrun_train(config, work_dir, nproc=nproc, cfg_options=list(cfg_options),
                          timeout=timeout, env=env, train_args=['--seed', '0'], script=script)
