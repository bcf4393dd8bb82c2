"""The comparisons the tests share: GuardedDDP's run against DDP's graph search
(find_unused_parameters=True) on the same ranks, as returned by
``scenarios.train_guarded_and_reference``; and UnusedParamsHook's per-iteration file
against the truth the model states, as returned by ``scenarios.train_toy_runner``."""
import torch


def assert_state_equal(actual, expected, where):
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_state_equal(actual[key], expected[key], f'{where}.{key}')
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_state_equal(a, e, f'{where}[{i}]')
    elif isinstance(expected, torch.Tensor):
        assert torch.allclose(actual, expected, atol=1e-6, rtol=0), where
    else:
        assert actual == expected, where


def assert_trains_like_graph_search(results):
    """Per rank: GuardedDDP chose 'complete', recorded exactly the usage the model states,
    and ended with the parameters and optimizer state of DDP's graph search; and every rank
    holds the same parameters."""
    for rank, result in enumerate(results):
        guarded, reference = result['guarded'], result['reference']
        assert guarded['decision'] == 'complete'
        # The recorded usage is the truth the model states, on every rank.
        assert guarded['usage'] == guarded['expected']
        for name, value in reference['params'].items():
            assert torch.allclose(guarded['params'][name], value, atol=1e-6, rtol=0), \
                f'rank {rank}: {name} differs from the find_unused_parameters=True run'
        # Optimizer state covers momentum buffers, Adam moments and per-parameter step
        # counts: a parameter that no rank used must have been skipped (grad None).
        assert_state_equal(guarded['optimizer_state'], reference['optimizer_state'],
                           f'rank {rank} optimizer state')
    for other in results[1:]:
        torch.testing.assert_close(results[0]['guarded']['params'], other['guarded']['params'])


def named_unused(result, line):
    """The unused parameters of one line of the hook's JSONL, by name, per rank."""
    return [sorted(result['names'][i] for i in ids) for ids in line['unused_per_rank']]


def assert_hook_matches_truth(result, iterations: int = 6):
    """Every iteration exactly once, in order, and on every rank exactly the parameters the
    model left unused."""
    assert [line['iter'] for line in result['lines']] == list(range(iterations))
    for line, truth in zip(result['lines'], result['truth']):
        assert named_unused(result, line) == truth, f'iteration {line["iter"]}'
