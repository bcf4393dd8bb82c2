"""A COCO dataset whose first evaluation is slow on rank 1, for the stall guard's phases under
mmcv 1.x: while rank 1 still tests, rank 0 has tested its share and waits in mmdet's
``collect_results_cpu`` inside ``DistEvalHook``. Its ``evaluate`` scores nothing (the tiny
data's boxes are not what the test is about)."""
import time

import torch.distributed as dist
from mmdet.datasets import DATASETS, CocoDataset

#: How long rank 1 stays on its first test image: past the test's stall timeout (2 s) and
#: the judgement's answer wait.
SLOW_SECONDS = 8.0


@DATASETS.register_module()
class SlowOnRank1CocoDataset(CocoDataset):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._slow_once = self.test_mode and dist.is_initialized() and dist.get_rank() == 1

    def __getitem__(self, index):
        if self._slow_once:
            self._slow_once = False
            time.sleep(SLOW_SECONDS)
        return super().__getitem__(index)

    def evaluate(self, results, *args, **kwargs):
        return {}
