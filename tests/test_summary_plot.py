"""The summary PNG: per rank, whole-iteration bins, only modules that were ever unused."""
import numpy as np
from matplotlib.image import imread

from mmdet3d_ddp_guard.reporting.summary import (plot_unused_by_rank,
                                                       unused_by_module_and_rank)

NAMES = ['stem.weight', 'branch.weight', 'branch.bias', 'dead.weight', 'head.weight']


def _ranks_take_turns(iterations):
    """The gated-refiner pattern: ``branch`` unused on rank (i + r) % 2, ``dead`` always."""
    return [dict(iter=i, epoch=0,
                 unused_per_rank=[([1, 2] if (i + rank) % 2 else []) + [3]
                                  for rank in range(2)])
            for i in range(iterations)]


def test_cells_show_the_ranks_taking_turns():
    data = unused_by_module_and_rank(NAMES, _ranks_take_turns(6))
    assert data['modules'] == ['dead', 'branch']  # most often unused first; never: absent
    assert data['width'] == 1 and data['edges'] == list(range(7))
    branch = data['fraction'][:, 1, :]
    assert branch[0].tolist() == [0, 1, 0, 1, 0, 1]
    assert branch[1].tolist() == [1, 0, 1, 0, 1, 0]
    assert (data['fraction'][:, 0, :] == 1).all()


def test_bins_are_whole_iterations_and_a_gap_is_no_record():
    history = [line for line in _ranks_take_turns(10) if line['iter'] not in (4, 5)]
    data = unused_by_module_and_rank(NAMES, history, max_bins=4)
    assert data['width'] == 3 and data['edges'] == [0, 3, 6, 9, 12]
    # Column 1 (iterations 3-5) holds only iteration 3: branch unused there on rank 0.
    assert data['fraction'][0, 1].tolist()[:2] == [1 / 3, 1.0]
    assert np.isnan(data['fraction'][:, :, 1:]).sum() == 0
    history = _ranks_take_turns(4) + [dict(iter=9, epoch=0, unused_per_rank=[[3], [3]])]
    assert np.isnan(unused_by_module_and_rank(NAMES, history, max_bins=10)['fraction'][
        0, 0, 4:9]).all()


def test_100k_iterations_and_hundreds_of_modules_stay_readable(tmp_path):
    names = [f'heads.{m}.weight' for m in range(400)]
    # Module m is unused on rank r in every (m + 1)-th iteration when (m + r) is even.
    history = [dict(iter=i, epoch=0,
                    unused_per_rank=[[m for m in range(0, 400, 7)
                                      if (m + r) % 2 == 0 and i % (m + 1) == 0]
                                     for r in range(2)])
               for i in range(100_000)]
    data = unused_by_module_and_rank(names, history)
    assert data['width'] == 500 and data['edges'][-1] == 100_000
    assert data['modules_ever_unused'] == len(range(0, 400, 7))
    assert data['modules'][0] == 'heads.0' and len(data['modules']) == 30
    path = plot_unused_by_rank(names, history, str(tmp_path / 'big.png'))
    height, width, _ = imread(path).shape
    assert width == 1100 and height < 1800


def test_nothing_unused_draws_nothing(tmp_path):
    history = [dict(iter=i, epoch=0, unused_per_rank=[[], []]) for i in range(3)]
    assert plot_unused_by_rank(NAMES, history, str(tmp_path / 'x.png')) is None
