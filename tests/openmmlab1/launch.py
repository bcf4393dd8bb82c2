"""The OpenMMLab 1.x training scripts the tests launch under torchrun
(:func:`demo.launch.torchrun_train` with ``script=``), and their data."""
import glob
import os.path as osp
from typing import Dict, Optional, Sequence

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
          cfg_options=(), timeout: float = 240,
          torchrun_args: Optional[Sequence[str]] = None):
    """One torchrun of ``script CONFIG`` on ``nproc`` gloo ranks over the tiny COCO data at
    ``data_root`` (made when missing); ``torchrun_train`` makes the repository importable
    (custom_imports). ``torchrun_args``: torchrun's options, as ``torchrun_train`` takes
    them."""
    if not osp.isdir(osp.join(data_root, 'annotations')):
        make_tiny_coco(data_root)
    # Unbuffered: Python before 3.9 block-buffers a non-interactive stderr, so two ranks
    # that raise at once would interleave their tracebacks in torchrun's shared stderr at
    # any byte (seen in CI: a rank's error class cut in two); unbuffered, each line of a
    # traceback is one write, whole.
    env = dict(TINY_COCO_ROOT=data_root.rstrip('/') + '/', PYTHONUNBUFFERED='1')
    return torchrun_train(config, work_dir, nproc=nproc, cfg_options=list(cfg_options),
                          timeout=timeout, env=env, train_args=['--seed', '0'], script=script,
                          torchrun_args=torchrun_args)


def stderr_by_rank(log_dir: str) -> Dict[int, str]:
    """What each rank wrote to its stderr, by local rank, in a run whose torchrun options
    were ``--redirects 2 --log_dir LOG_DIR`` (torchrun writes
    ``LOG_DIR/<run id>/attempt_0/<local rank>/stderr.log``). A rank's own file holds its
    writes in order, where torchrun's shared stderr may cut a rank's line where another
    rank writes: Python's own excepthook writes an error's class, its ``: `` and its
    message in separate writes."""
    texts = {}
    for path in glob.glob(osp.join(log_dir, '*', 'attempt_*', '*', 'stderr.log')):
        with open(path) as file:
            texts[int(osp.basename(osp.dirname(path)))] = file.read()
    return texts
