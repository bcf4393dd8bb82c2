"""The comparisons the tests share: GuardedDDP's run against DDP's graph search
(find_unused_parameters=True) on the same ranks, as returned by
``scenarios.train_guarded_and_reference``; UnusedParamsHook's per-iteration file against
the truth the model states, as returned by ``scenarios.train_toy_runner``; and two runs'
reduced gradients in units of rounding, as returned by ``scenarios.reduced_gradients``."""
import torch


def tolerance(world_size: int) -> float:
    """How far GuardedDDP's training may be from the graph search's: not at all on 2 ranks
    (1/2 is exact and two addends have one sum); on more, DDP's own fast path and graph
    search round apart too (tests/test_three_rank_rounding.py bounds the gradients). Only
    for two different runs: the ranks of one run hold bit-identical replicas at any size."""
    return 0.0 if world_size <= 2 else 1e-6


def same_tensor(actual, expected, atol: float = 0.0) -> bool:
    """Bit for bit where ``atol`` is 0 (``allclose`` would broadcast shapes and let dtypes
    differ); within ``atol`` otherwise."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    if atol == 0.0:
        return torch.equal(actual, expected)
    return torch.allclose(actual, expected, atol=atol, rtol=0)


def assert_state_equal(actual, expected, where, atol: float = 0.0):
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_state_equal(actual[key], expected[key], f'{where}.{key}', atol)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_state_equal(a, e, f'{where}[{i}]', atol)
    elif isinstance(expected, torch.Tensor):
        assert same_tensor(actual, expected, atol), where
    else:
        assert actual == expected, where


def assert_trains_like_graph_search(results):
    """Per rank: GuardedDDP chose 'complete', recorded exactly the usage the model states,
    and ended with the parameters and optimizer state of DDP's graph search (bit for bit on
    2 ranks); and every rank holds the same parameters and optimizer state, bit for bit."""
    atol = tolerance(len(results))
    for rank, result in enumerate(results):
        guarded, reference = result['guarded'], result['reference']
        assert guarded['decision'] == 'complete'
        # The recorded usage is the truth the model states, on every rank.
        assert guarded['usage'] == guarded['expected']
        for name, value in reference['params'].items():
            assert same_tensor(guarded['params'][name], value, atol), \
                f'rank {rank}: {name} differs from the find_unused_parameters=True run'
        # Optimizer state covers momentum buffers, Adam moments and per-parameter step
        # counts: a parameter that no rank used must have been skipped (grad None).
        assert_state_equal(guarded['optimizer_state'], reference['optimizer_state'],
                           f'rank {rank} optimizer state', atol)
    # No tolerance between the ranks, at any size: DDP hands every rank the same averaged
    # gradients and every rank takes the same step, so replicas that differ by one rounding
    # have already diverged (a rank-local gradient, a step one rank skipped).
    first = results[0]['guarded']
    for rank, result in enumerate(results[1:], 1):
        other = result['guarded']
        assert other['params'].keys() == first['params'].keys()
        for name, value in first['params'].items():
            assert same_tensor(other['params'][name], value), \
                f'rank {rank}: {name} is not rank 0\'s bit for bit'
        assert_state_equal(other['optimizer_state'], first['optimizer_state'],
                           f'rank {rank} optimizer state against rank 0\'s')


def named_unused(result, line):
    """The unused parameters of one line of the hook's JSONL, by name, per rank."""
    return [sorted(result['names'][i] for i in ids) for ids in line['unused_per_rank']]


def assert_hook_matches_truth(result, iterations: int = 6):
    """Every iteration exactly once, in order, and on every rank exactly the parameters the
    model left unused."""
    assert [line['iter'] for line in result['lines']] == list(range(iterations))
    for line, truth in zip(result['lines'], result['truth']):
        assert named_unused(result, line) == truth, f'iteration {line["iter"]}'


#: float32's unit roundoff: the largest relative error of one rounding.
UNIT_ROUNDOFF = torch.finfo(torch.float32).eps / 2


def rounding_units(actual, expected, local, world_size: int) -> float:
    """The largest difference between two runs' reduced gradients (flat per iteration, NaN
    where a parameter has none), over iterations and elements, in units of
    ``u * sum_r |g_r / W|``, u being float32's unit roundoff and g_r rank r's own gradient
    (``local``, per iteration). Two summation orders of the same W addends round at most
    2 (W - 1) such units apart. Infinite where only one run has a gradient, or where the
    runs differ although every rank's gradient is zero."""
    worst = 0.0
    for a, e, gradients in zip(actual, expected, local):
        if not torch.equal(torch.isnan(a), torch.isnan(e)):
            return float('inf')
        defined = ~torch.isnan(a)
        difference = (a - e).abs()[defined]
        scale = ((gradients * (1.0 / world_size)).abs().sum(0) * UNIT_ROUNDOFF)[defined]
        if bool((difference[scale == 0] > 0).any()):
            return float('inf')
        if bool((scale > 0).any()):
            worst = max(worst, float((difference[scale > 0] / scale[scale > 0]).max()))
    return worst
