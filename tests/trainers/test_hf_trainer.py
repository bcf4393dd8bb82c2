"""The Hugging Face Trainer with ``with guard_ddp_builds(): trainer.train()``, against the
Trainer's own ``ddp_find_unused_parameters=True``, on 2 gloo ranks in one process group: a
small ``PreTrainedModel`` whose vision tower runs only on batches with images (rank 1's
sometimes, rank 0's never), with and without gradient checkpointing (where the Trainer's
default passes ``find_unused_parameters=False`` and such a branch hangs plain DDP), bit for bit
on every rank. Run where transformers is installed (the trainers leg of
tools/version_matrix.sh)."""
import pytest

from tests.dist_utils import run_distributed
from tests.trainers.comparison import assert_each_case_trains_alike
from tests.trainers.hf_trainer_runs import side_by_side

pytest.importorskip('transformers')


def test_train_in_the_block_trains_as_the_trainer_s_graph_search(tmp_path):
    checkpointing = [False, True]
    results = run_distributed(side_by_side, checkpointing, str(tmp_path), timeout=300)
    assert_each_case_trains_alike(
        results, [f'gradient checkpointing {on}' for on in checkpointing],
        ('params', 'optimizer_state', 'none_grads'), ('BlockGuardedDDP', 'DistributedDataParallel'))
    for per_rank in results:
        for runs in per_rank:
            assert runs['guarded']['ddp_class'] == 'DistributedDataParallel'
            # The vision tower was unused on one rank only in some steps.
            assert runs['guarded']['ranks_differed'] > 0
