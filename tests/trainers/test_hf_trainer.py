"""The Hugging Face Trainer with ``with guard_ddp_builds(): trainer.train()``, against the
Trainer's own ``ddp_find_unused_parameters=True``, on 2 gloo ranks in one process group: a
small ``PreTrainedModel`` whose vision tower runs only on batches with images (rank 1's
sometimes, rank 0's never), with and without gradient checkpointing (where the Trainer's
default passes ``find_unused_parameters=False`` and such a branch hangs plain DDP), bit for bit
on every rank. Run where transformers is installed (the trainers leg of
tools/version_matrix.sh)."""
import pytest

from tests.dist_utils import run_distributed
from tests.equivalence import assert_state_equal
from tests.trainers.hf_trainer_runs import side_by_side

pytest.importorskip('transformers')


def test_train_in_the_block_trains_as_the_trainer_s_graph_search(tmp_path):
    checkpointing = [False, True]
    results = run_distributed(side_by_side, checkpointing, str(tmp_path), timeout=300)
    for rank, per_rank in enumerate(results):
        for with_checkpointing, runs in zip(checkpointing, per_rank):
            guarded, reference = runs['guarded'], runs['reference']
            where = f'rank {rank} gradient checkpointing {with_checkpointing}'
            assert (guarded['wrapper'], reference['wrapper']) == \
                ('BlockGuardedDDP', 'DistributedDataParallel'), where
            assert guarded['ddp_class'] == 'DistributedDataParallel', where
            for key in ('params', 'optimizer_state', 'none_grads'):
                assert_state_equal(guarded[key], reference[key], f'{where} {key}')
            # The vision tower was unused on one rank only in some steps, on both in others.
            assert guarded['ranks_differed'] > 0, where
            assert any(reference['none_grads']) and not all(reference['none_grads']), where
