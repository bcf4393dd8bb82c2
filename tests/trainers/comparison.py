"""The comparison every trainer's test makes: on every rank, for every case, the guarded run
and the trainer's own ``find_unused_parameters=True`` run ended alike, bit for bit, and the
data did leave parameters unused (on every rank in some steps, not in all)."""
from typing import Dict, List, Sequence

from tests.equivalence import assert_state_equal


def assert_each_case_trains_alike(results: List[List[Dict]], cases: Sequence, keys: Sequence[str],
                                  wrappers: Sequence[str]) -> None:
    """``results[rank][case]`` holds ``guarded`` and ``reference`` runs, each with ``keys``
    and ``wrapper``, the class names of the DDP each trained under (``wrappers``: the
    guarded run's, the reference's)."""
    for rank, per_rank in enumerate(results):
        for case, runs in zip(cases, per_rank):
            guarded, reference = runs['guarded'], runs['reference']
            where = f'rank {rank} {case}'
            assert [guarded['wrapper'], reference['wrapper']] == list(wrappers), where
            for key in keys:
                assert_state_equal(guarded[key], reference[key], f'{where} {key}')
            assert any(reference['none_grads']) and not all(reference['none_grads']), where
