"""The guard under OpenMMLab 1.x (mmcv-full 1.x, mmdet 2.x), trained for real: 2 gloo ranks
under torchrun, mmdet 2.x's own tools/train.py (train_detector, build_ddp) and a
codebase-shaped plugin whose train module imported ``MMDistributedDataParallel`` at its top,
on a RetinaNet whose refiner rank 1's batches never run (tests/openmmlab1/branch_detector.py).
"""
import os.path as osp
import re

import pytest
import torch

from demo.launch import free_port
from tests.openmmlab1.branch_detector import REFINER_PARAMS
from tests.openmmlab1.launch import (CONFIGS, MMDET_TRAIN, PLUGIN_CONFIGS, PLUGIN_TRAIN,
                                     stderr_by_rank, train)
from tests.timeouts import scaled

pytestmark = pytest.mark.timeout(400)

GUARDED = osp.join(CONFIGS, 'tiny_retinanet_branch_guarded.py')
FINISHED = 'Iter [4/4]'


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp('tiny_coco'))


def _config(tmp_path, name: str, *lines: str, base: str = GUARDED) -> str:
    """A config of ``lines`` over ``base`` (mmcv joins an absolute ``_base_`` as it is)."""
    path = tmp_path / f'{name}.py'
    path.write_text('\n'.join([f'_base_ = [{base!r}]', *lines]) + '\n')
    return str(path)


def _run(data_root, tmp_path, config, name, script=MMDET_TRAIN, cfg_options=(),
         torchrun_args=None):
    return train(script, config, str(tmp_path / name), data_root, cfg_options=cfg_options,
                 timeout=scaled(180), torchrun_args=torchrun_args)


def _decision(output: str) -> str:
    return re.search(r"MMDistributedDataParallel \(guarded by mmdet3d_ddp_guard\) decision "
                     r"\(at build\): (mode='\w+' \(requested [^\n]*)", output).group(1)


def _weights_and_momenta(work_dir):
    checkpoint = torch.load(osp.join(work_dir, 'iter_4.pth'), map_location='cpu')
    momenta = [state['momentum_buffer'] for state in checkpoint['optimizer']['state'].values()]
    return checkpoint['state_dict'], momenta


def _assert_trains_the_same(first, second):
    weights, momenta = _weights_and_momenta(first)
    other_weights, other_momenta = _weights_and_momenta(second)
    assert weights.keys() == other_weights.keys()
    for name in weights:
        assert torch.equal(weights[name], other_weights[name]), name
    assert len(momenta) == len(other_momenta)
    assert all(torch.equal(a, b) for a, b in zip(momenta, other_momenta))


def test_plugin_config_with_the_one_line_trains_where_plain_mmcv_ddp_dies(data_root,
                                                                          tmp_path):
    """The done-when of OpenMMLab 1.x: the plugin's config plus one custom_imports line
    trains on 2 ranks whose batches leave different parameters unused; mmcv's own DDP dies
    on the same model with DDP's real error."""
    plain = _run(data_root, tmp_path,
                 osp.join(PLUGIN_CONFIGS, 'plugin_tiny_retinanet_branch_plain.py'), 'plain',
                 script=PLUGIN_TRAIN)
    assert plain.returncode != 0 and not plain.timed_out, plain.output[-3000:]
    assert 'Expected to have finished reduction in the prior iteration' in plain.output
    assert 'guarded by mmdet3d_ddp_guard) decision' not in plain.output

    guarded = _run(data_root, tmp_path,
                   osp.join(PLUGIN_CONFIGS, 'plugin_tiny_retinanet_branch_guarded.py'),
                   'guarded', script=PLUGIN_TRAIN)
    assert guarded.returncode == 0, guarded.output[-3000:]
    assert FINISHED in guarded.output
    assert _decision(guarded.output).startswith(
        "mode='complete' (requested find_unused_parameters='auto', from default: the config "
        'does not write find_unused_parameters')
    # rank 1 left the refiner unused in every iteration, rank 0 never did.
    assert re.search(r'rank 1, iteration 0: 3 unused\n\s+refiner\.0 \(Conv2d\): weight',
                     guarded.output), guarded.output[-3000:]
    assert re.findall(r'\[branch\] rank=1 call=\d ran=(\d)', guarded.output) == ['0'] * 4


def test_train_detector_trains_like_the_graph_search(data_root, tmp_path):
    """mmdet 2.x's tools/train.py (train_detector, build_ddp): with the config silent the
    guard trains mode 'complete', and its weights and SGD momenta after 4 iterations are
    those of DDP's graph search, which the config asks for in the second run."""
    auto = _run(data_root, tmp_path, GUARDED, 'auto')
    assert auto.returncode == 0, auto.output[-3000:]
    assert _decision(auto.output).startswith("mode='complete'")
    graph = _run(data_root, tmp_path, _config(tmp_path, 'graph', 'find_unused_parameters = True'),
                 'graph')
    assert graph.returncode == 0, graph.output[-3000:]
    assert _decision(graph.output).startswith(
        "mode='find_unused' (requested find_unused_parameters=True, from config top-level")
    _assert_trains_the_same(str(tmp_path / 'auto'), str(tmp_path / 'graph'))


def test_false_written_is_the_strict_fast_path_every_rank_names_the_parameters(data_root,
                                                                               tmp_path):
    # Each rank's stderr in a file of its own: two ranks that raise at once interleave their
    # tracebacks in torchrun's shared stderr (seen in CI, 2026-12-02, -04 and -06, the last
    # unbuffered: the class and its ': ' come in separate writes).
    log_dir = str(tmp_path / 'rank_logs')
    run = _run(data_root, tmp_path, _config(tmp_path, 'strict', 'find_unused_parameters = False'),
               'strict', torchrun_args=[f'--master_port={free_port()}', '--redirects', '2',
                                        '--log_dir', log_dir])
    assert run.returncode != 0 and not run.timed_out, run.output[-3000:]
    stderr = stderr_by_rank(log_dir)
    assert sorted(stderr) == [0, 1], (run.output[-3000:], stderr)
    assert _decision(stderr[0]).startswith(
        "mode='strict' (requested find_unused_parameters=False, from config top-level")
    # One traceback per rank, the same words, naming the parameters and the fix in mmcv
    # 1.x's words: the key its training scripts read, no MMEngine line.
    errors = []
    for rank, text in stderr.items():
        assert text.count('UnusedParametersError: ') == 1, (rank, text[-4000:])
        errors += re.findall(r'MMDistributedDataParallel \(guarded by mmdet3d_ddp_guard\): '
                             r'parameters received no gradient[^\n]*', text)
        for name in REFINER_PARAMS:
            assert name in text, (rank, name)
        assert 'RuntimeError: Expected to have finished reduction' not in text
        assert "Fix: let the guard handle them, in your config:\n    find_unused_parameters " \
            "= 'auto'\nin place of `find_unused_parameters = False`" in text, (rank, text)
        assert 'model_wrapper_cfg' not in text and 'GuardedDDP' not in text
    assert len(errors) == 2 and len(set(errors)) == 1, errors


def test_reentrant_checkpointing_trains_as_plain_mmcv_ddp(data_root, tmp_path):
    """ResNet's with_cp=True (torch.utils.checkpoint, reentrant), in a real mmdet detector
    with every parameter used: StreamPETR's configs write find_unused_parameters=False
    because of it. The guard's default trains the weights of plain mmcv DDP; layers
    nearest the loss inside the block, and DDP's graph search dying of it, are in
    tests/openmmlab1/test_step_backwards.py."""
    options = ['model.backbone.with_cp=True']
    every_parameter_used = 'model = dict(branch_label=0)'
    guarded = _run(data_root, tmp_path, _config(tmp_path, 'cp', every_parameter_used), 'cp',
                   cfg_options=options)
    assert guarded.returncode == 0, guarded.output[-3000:]
    assert _decision(guarded.output).startswith("mode='complete'")
    plain = _run(data_root, tmp_path, _config(tmp_path, 'cp_plain', every_parameter_used,
                                              'ddp_guard = dict(enabled=False)'),
                 'cp_plain', cfg_options=options)
    assert plain.returncode == 0, plain.output[-3000:]
    _assert_trains_the_same(str(tmp_path / 'cp'), str(tmp_path / 'cp_plain'))


def test_no_collective_of_ours_while_every_parameter_is_used(data_root, tmp_path):
    """``branch_label=0``: every image holds a car, so every rank runs the refiner in every
    iteration; the guarded run issues exactly the collectives of plain mmcv DDP."""
    lines = ["custom_imports = dict(imports=['tests.openmmlab1.branch_detector', "
             "'tests.openmmlab1.collective_count_hook', 'mmdet3d_ddp_guard'], "
             'allow_failed_imports=False)',
             "custom_hooks = [dict(type='CollectiveCountHook')]",
             'model = dict(branch_label=0)']
    counts = {}
    for name, extra in (('guarded', []), ('plain', ['ddp_guard = dict(enabled=False)'])):
        run = _run(data_root, tmp_path, _config(tmp_path, name, *lines, *extra), name)
        assert run.returncode == 0, run.output[-3000:]
        counts[name] = sorted(re.findall(r'\[collectives\] rank=(\d) issued=(\d+)',
                                         run.output))
        if name == 'guarded':  # the watchdog stops with mmcv's runner
            assert len(re.findall(r'\[stall guard\] rank=\d stopped=True', run.output)) == 2
    assert len(counts['guarded']) == 2 and int(counts['guarded'][0][1]) > 0
    assert counts['guarded'] == counts['plain']


def test_a_crash_ends_as_fast_as_without_the_stall_guard(data_root, tmp_path):
    """Rank 1's forward raises at iteration 2 while rank 0 goes on to the all-reduce of mmdet
    2.x's log variables (its ``_parse_losses``). With the stall guard on (180 s, the default)
    the job ends as soon as with it off, and rank 1's traceback is in the log."""
    runs = {}
    for name, extra in (('on', []), ('off', ['ddp_guard = dict(stall_timeout=None)'])):
        config = _config(tmp_path, f'raises_{name}', 'model = dict(fail_rank=1, fail_call=2)',
                         *extra)
        runs[name] = _run(data_root, tmp_path, config, f'raises_{name}')
    print(f"mmcv 1.x, rank 1 raises: the job ends after {runs['on'].seconds:.1f} s with the "
          f"stall guard on, {runs['off'].seconds:.1f} s with it off")
    for run in runs.values():
        assert run.returncode != 0 and not run.timed_out, run.output[-3000:]
        assert re.search(r'ValueError: rank 1 cannot read its batch$', run.output, re.M)
        assert "raise ValueError(f'rank {rank} cannot read its batch')" in run.output
    assert runs['on'].seconds < runs['off'].seconds + scaled(10.0)


def test_fp16_on_the_cpu_is_not_refused_by_the_guard(data_root, tmp_path):
    """``fp16 = dict(...)`` on the CPU: the guard refuses nothing (the step-backward shapes
    train mmcv's Fp16OptimizerHook as mmcv's own DDP does, tests/openmmlab1/test_step_
    backwards.py); RetinaNet's own ``auto_fp16`` then casts its images to half, which
    torch's CPU convolution does not run: torch's error, as under mmcv's own DDP."""
    run = _run(data_root, tmp_path, _config(tmp_path, 'fp16', 'fp16 = dict(loss_scale=512.0)'),
               'fp16')
    assert run.returncode != 0 and not run.timed_out
    assert "not implemented for 'Half'" in run.output, run.output[-3000:]
    assert 'Fp16OptimizerHook needs CUDA' not in run.output


def test_a_rank_waiting_in_the_evaluation_is_named_as_evaluating(data_root, tmp_path):
    """mmdet's DistEvalHook after iteration 1 (of 0 to 3): rank 1 is slow on its first test
    image (tests/openmmlab1/slow_evaluation.py), so rank 0, its share tested, waits in
    ``collect_results_cpu``; the stall guard (2 s) judges the wait, which can end, and names
    both ranks' phase 'validation', where the phase after the optimizer step was all it
    knew (issue 49); the run then trains on to its end."""
    config = _config(
        tmp_path, 'slow_evaluation',
        "custom_imports = dict(imports=['tests.openmmlab1.branch_detector', "
        "'tests.openmmlab1.slow_evaluation', 'mmdet3d_ddp_guard'], allow_failed_imports=False)",
        "data = dict(val=dict(type='SlowOnRank1CocoDataset'))",
        "evaluation = dict(interval=2, metric='bbox')",
        'ddp_guard = dict(stall_timeout=2)')
    run = _run(data_root, tmp_path, config, 'slow_evaluation')
    assert run.returncode == 0 and FINISHED in run.output, run.output[-3000:]
    # "rank 0: in barrier called from mmdet/apis/test.py:158 in collect_results_cpu
    # (iteration 1, validation); its last collective: ..."
    places = set(re.findall(r'^ +rank (\d): (in \w+ called from \S+ in \w+|busy outside '
                            r'collectives) \((iteration \d+|data for iteration \d+), '
                            r'([a-z ]+)\)', run.output, re.M))
    assert ('0', 'in barrier called from mmdet/apis/test.py:158 in collect_results_cpu',
            'iteration 1', 'validation') in places, run.output[-4000:]
    assert ('1', 'busy outside collectives', 'iteration 1', 'validation') in places, places
    assert not any(phase == 'optimizer step' for *_, phase in places), places
