"""The plain adapter under torchrun, as users launch it: a worker that crashes is restarted
(``--max-restarts``) and resumes from the script's checkpoint, training bit for bit as
torch's DDP with its graph search under the same crash and restart; and the report's summary
is written when the script ends without ``finish()``."""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

from demo.launch import REPO, free_port
from tests.dist_utils import TRUSTED_LOAD, run_launcher
from tests.equivalence import assert_state_equal
from tests.torchrun_restart import RESTART_ENV, restart_args, retrying_gloo_reconnects

pytestmark = pytest.mark.timeout(400)


def _torchrun(*script_args, max_restarts: int = 0) -> subprocess.CompletedProcess:
    """The loop under torchrun; where workers restart, on a fresh store each attempt, and
    again where gloo's reconnect alone failed (tests/torchrun_restart.py)."""
    launch = (restart_args(max_restarts) if max_restarts else
              ['--master_addr=127.0.0.1', f'--master_port={free_port()}'])
    command = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2'] + launch \
        + [osp.join(REPO, 'tests', 'pytorch', 'torchrun_loop.py')] + list(script_args)
    environment = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS='1',
                       **(RESTART_ENV if max_restarts else {}))
    return run_launcher(command, timeout=150, env=environment)


def _final_states(out: str):
    return [torch.load(f'{out}.{rank}', **TRUSTED_LOAD) for rank in range(2)]


def test_a_restarted_worker_resumes_and_trains_as_the_graph_search(tmp_path):
    states = {}
    for wrapper in ('guarded', 'graph_search'):
        out = str(tmp_path / wrapper)

        def launch(attempt, wrapper=wrapper, out=out):
            checkpoint_dir = tmp_path / f'{wrapper}{attempt}'  # each attempt starts anew
            checkpoint_dir.mkdir()
            return _torchrun('--wrapper', wrapper, '--checkpoint-dir', str(checkpoint_dir),
                             '--out', out, '--crash-at', '3', max_restarts=1)
        run = retrying_gloo_reconnects(launch, output=lambda run: run.stdout + run.stderr)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert 'rank 1 crashes once, before step 3' in run.stderr
        states[wrapper] = _final_states(out)
    for rank in range(2):
        guarded, reference = states['guarded'][rank], states['graph_search'][rank]
        assert guarded['restarted'] == 1 and guarded['start'] == 3
        for key in ('params', 'buffers', 'optimizer_state', 'none_grads'):
            assert_state_equal(guarded[key], reference[key], f'rank {rank} {key}')


def test_the_summary_is_written_when_the_script_ends_without_finish(tmp_path):
    report_dir = tmp_path / 'report'
    run = _torchrun('--wrapper', 'guarded', '--checkpoint-dir', str(tmp_path), '--out',
                    str(tmp_path / 'out'), '--report-dir', str(report_dir))
    assert run.returncode == 0, run.stderr[-3000:]
    assert 'UnusedParamsReport summary' in run.stderr
    assert (report_dir / 'unused_params_summary.txt').is_file()
