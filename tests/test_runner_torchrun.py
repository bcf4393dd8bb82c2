"""GuardedDDP through an unchanged MMEngine Runner: mmdet3d's own tools/train.py under
torchrun, 2 gloo processes on the CPU, launcher='pytorch'."""
import re

import pytest

from demo.__main__ import TOY_CONFIG, logged_blocks, plain_ddp_options
from demo.launch import torchrun_train
from tests.timeouts import scaled

pytestmark = pytest.mark.timeout(200)


def _train(tmp_path, *options):
    return torchrun_train(TOY_CONFIG, str(tmp_path), cfg_options=options, timeout=scaled(150))


def test_guarded_ddp_trains_through_tools_train_py(tmp_path):
    run = _train(tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert "no CUDA here; rank 0 of 2 uses a gloo process group (the config asked " \
        "for 'gloo')" in run.output
    assert "mode='complete' (requested find_unused_parameters='auto', from default)" \
        in run.output
    assert 'Iter(train) [6/6]' in run.output
    assert 'the set of unused parameters changes between iterations' in run.output
    # What `make demo` shows of the summary: the verdict and the per-parameter table.
    summary = '\n'.join(logged_blocks(run.output, 'UnusedParamsHook summary'))
    assert 'Would plain DDP have failed? YES' in summary
    assert re.search(r'dead\.weight +\(16, 16\) +256 +Linear +6/6', summary), summary


def test_plain_ddp_dies_with_the_real_error(tmp_path):
    run = _train(tmp_path, *plain_ddp_options())
    assert run.returncode != 0 and not run.timed_out
    assert 'Expected to have finished reduction in the prior iteration' in run.output


def test_top_level_find_unused_parameters_is_honoured(tmp_path):
    """MMEngine drops this key when model_wrapper_cfg is set; GuardedDDP reads it."""
    run = _train(tmp_path, 'find_unused_parameters=True')
    assert run.returncode == 0, run.output[-3000:]
    assert ("mode='find_unused' (requested find_unused_parameters=True, from config "
            'top-level find_unused_parameters)') in run.output
    # The one line that lets GuardedDDP choose, also when True is inherited from mmdet3d (the
    # message is wrapped at spaces: the line stays whole, the words before it may break).
    assert "add this line to your config: find_unused_parameters='auto'" in \
        ' '.join(run.output.split())


def test_top_level_false_stops_with_the_clear_error(tmp_path):
    run = _train(tmp_path, 'find_unused_parameters=False')
    assert run.returncode != 0 and not run.timed_out
    assert 'UnusedParametersError' in run.output
    assert 'was requested (config top-level find_unused_parameters)' in run.output
    assert 'dead.weight' in run.output


def test_contradicting_settings_refuse_to_start(tmp_path):
    run = _train(tmp_path, 'find_unused_parameters=False',
                 'model_wrapper_cfg.find_unused_parameters=True')
    assert run.returncode != 0
    assert 'sets find_unused_parameters twice with different values' in run.output
