"""Process topologies beyond 2 ranks on one launcher: 4 ranks whose unused sets all differ
in the same iteration; two torchrun agents as two nodes; a torchrun restart with resume."""
import json
import os
import os.path as osp
from concurrent.futures import ThreadPoolExecutor

import pytest

from demo.__main__ import TOY_CONFIG
from tests.toys import ToyDetector
from demo.launch import free_port, torchrun_train
from tests.crash_once_hook import CRASH_MESSAGE
from tests.dist_utils import run_distributed
from tests.equivalence import assert_trains_like_graph_search
from tests.scenarios import train_guarded_and_reference
from tests.timeouts import scaled
from tests.torchrun_restart import RESTART_ENV, restart_args, retrying_gloo_reconnects

# The toy config's model with a branch that ranks disagree on, through tools/train.py.
PATTERN = 'rank_dependent'
TOY_OPTIONS = [f'model.pattern={PATTERN}']


@pytest.mark.timeout(300)
@pytest.mark.skipif(os.environ.get('DDP_GUARD_TEST_WORLD_SIZE', '4') != '4',
                    reason='DDP_GUARD_TEST_WORLD_SIZE forces another world size; this '
                    'test is about 4 ranks')
def test_four_ranks_with_four_different_unused_sets():
    results = run_distributed(train_guarded_and_reference, pattern='one_gate_per_rank',
                              optimizer='sgd', world_size=4)
    assert len(results) == 4
    assert_trains_like_graph_search(results)
    for per_rank in results[0]['guarded']['usage']:
        assert len({tuple(names) for names in per_rank}) == 4, per_rank


def _jsonl(work_dir):
    with open(osp.join(work_dir, 'unused_params.jsonl')) as f:
        return [json.loads(line) for line in f]


def _assert_file_matches_truth(work_dir, iterations, world_size=2):
    """The hook's per-iteration file holds every iteration exactly once, each with exactly
    the parameters the toy model left unused on each rank."""
    with open(osp.join(work_dir, 'unused_params_table.json')) as f:
        names = [row['name'] for row in json.load(f)]
    truth_model = ToyDetector(PATTERN)
    lines = _jsonl(work_dir)
    assert [line['iter'] for line in lines] == list(range(iterations))
    for line in lines:
        assert [sorted(names[i] for i in ids) for ids in line['unused_per_rank']] == [
            truth_model.expected_unused(line['iter'], rank) for rank in range(world_size)
        ], f'iteration {line["iter"]}'


# torch elastic's shutdown race: the agent that hosts the c10d store can finish and close it
# while the other agent, its worker done, still polls the store in its monitor loop; that
# agent then exits with "The connection to the C10d store has failed" (num_nodes_waiting),
# in about 1 of 3 runs here, with or without this package. That failure of torch's agent,
# and only it, is retried in a fresh work dir; any other failure fails the test at once.
STORE_CLOSED_EARLY = 'The connection to the C10d store has failed'
TWO_NODE_ATTEMPTS = 3


@pytest.mark.timeout(500)
def test_two_torchrun_agents_as_two_nodes(tmp_path):
    """``--nnodes 2 --node_rank 0/1``, c10d rendezvous on loopback, one process per node."""
    for attempt in range(TWO_NODE_ATTEMPTS):
        work_dir = tmp_path / f'attempt{attempt}'
        endpoint = f'127.0.0.1:{free_port()}'

        def node(node_rank):
            return torchrun_train(
                TOY_CONFIG, str(work_dir), nproc=1, timeout=scaled(150), cfg_options=TOY_OPTIONS,
                torchrun_args=['--nnodes=2', f'--node_rank={node_rank}',
                               '--rdzv-backend=c10d', f'--rdzv-endpoint={endpoint}',
                               f'--rdzv-id={tmp_path.name}{attempt}'])

        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(node, [0, 1]))
        if not any(run.returncode and STORE_CLOSED_EARLY in run.output for run in runs):
            break
    for run in runs:
        assert run.returncode == 0, run.output[-3000:]
    # A world of 2 from agents of one process each: one rank in each agent.
    outputs = ''.join(run.output for run in runs)
    assert 'rank 0 of 2 uses a gloo process group' in outputs
    assert 'Iter(train) [6/6]' in outputs
    _assert_file_matches_truth(str(work_dir), 6)


RESTART_ITERS, CRASH_AT, CHECKPOINT_EVERY = 8, 5, 3


def _restart_config(tmp_path):
    """The toy config, a checkpoint every 3 iterations, and rank 1 crashing before
    iteration 5 in torchrun's first attempt (after the checkpoint of iteration 3)."""
    path = tmp_path / 'toy_crash_once.py'
    path.write_text(
        f'_base_ = [{TOY_CONFIG!r}]\n'
        "custom_imports = dict(imports=['mmdet3d_ddp_guard', 'tests.toys', "
        "'tests.crash_once_hook'], allow_failed_imports=False)\n"
        f'model = dict(pattern={PATTERN!r})\n'
        f'train_cfg = dict(max_iters={RESTART_ITERS})\n'
        f'default_hooks = dict(checkpoint=dict(interval={CHECKPOINT_EVERY}))\n'
        "custom_hooks = [dict(type='UnusedParamsHook', interval=50), "
        f"dict(type='CrashOnceHook', at_iter={CRASH_AT})]\n")
    return str(path)


@pytest.mark.timeout(600)
def test_torchrun_restart_resumes_and_the_hook_covers_every_iteration_once(tmp_path):
    config = _restart_config(tmp_path)
    # The training processes import tests.crash_once_hook from the repository root.
    repo_root = osp.dirname(osp.dirname(osp.abspath(__file__)))
    env = dict(PYTHONPATH=os.pathsep.join(filter(None, [repo_root,
                                                        os.environ.get('PYTHONPATH')])),
               **RESTART_ENV)
    work_dirs = []

    def launch(attempt):  # each attempt in a fresh work dir (tests/torchrun_restart.py)
        work_dirs.append(str(tmp_path / f'attempt{attempt}'))
        return torchrun_train(config, work_dirs[-1], timeout=scaled(150), env=env,
                              torchrun_args=restart_args(max_restarts=1),
                              train_args=['--resume'])
    run = retrying_gloo_reconnects(launch, output=lambda run: run.output)
    work_dir = work_dirs[-1]
    assert run.returncode == 0, run.output[-4000:]
    assert CRASH_MESSAGE in run.output
    assert f'resumed epoch: 0, iter: {CHECKPOINT_EVERY}' in run.output
    assert f'Iter(train) [{RESTART_ITERS}/{RESTART_ITERS}]' in run.output
    _assert_file_matches_truth(work_dir, RESTART_ITERS)
    with open(osp.join(work_dir, 'unused_params_summary.json')) as f:
        summary = json.load(f)
    assert summary['iterations_seen'] == RESTART_ITERS
    truth_model = ToyDetector(PATTERN)
    unused_on_some_rank = {}
    for iteration in range(RESTART_ITERS):
        for name in set().union(*(truth_model.expected_unused(iteration, rank)
                                  for rank in range(2))):
            unused_on_some_rank[name] = unused_on_some_rank.get(name, 0) + 1
    assert {p['name']: p['iterations_unused'] for p in summary['parameters']} == \
        unused_on_some_rank
