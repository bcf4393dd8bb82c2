"""What one form of MMEngine (mmengine-lite, onedl-mmengine, a source tree: whichever is first
on ``PYTHONPATH``) does with the guard, run as a script in a venv without the ``mmengine``
distribution, its result printed as JSON for ``test_mmengine_forms.py``:

- what the package found (``mmdet3d_ddp_guard.FRAMEWORKS``) and registered (``GuardedDDP`` in
  MMEngine's ``MODEL_WRAPPERS``), and its ``--version`` report;
- a ToyDetector whose branch is used on some ranks only (``rank_dependent``) trained through
  MMEngine's Runner on 2 gloo ranks with the README's two config lines, and with MMEngine's
  own ``MMDistributedDataParallel(find_unused_parameters=True)``: every rank's parameters;
- the same Runner without the lines (MMEngine's wrapper, its default) on a branch every rank
  skips on odd iterations: the error it dies with.
"""
import json
import subprocess
import sys
import tempfile

import torch

from tests.dist_utils import DistributedRunError, run_distributed

#: The README's two lines: the import, and the wrapper.
GUARD_LINES = dict(custom_imports=dict(imports=['mmdet3d_ddp_guard'], allow_failed_imports=False),
                   model_wrapper_cfg=dict(type='GuardedDDP'))
#: MMEngine's own wrapper (device_ids=None: the Runner's [LOCAL_RANK] is refused on a CPU).
MMENGINE_GRAPH_SEARCH = dict(type='MMDistributedDataParallel', device_ids=None,
                             find_unused_parameters=True)
MMENGINE_DEFAULT = dict(type='MMDistributedDataParallel', device_ids=None)


def train(rank: int, world_size: int, work_dir: str, pattern: str, lines: dict):
    from mmengine.config import Config
    from mmengine.runner import Runner

    import tests.toys  # noqa: F401  (registers ToyDetector and ToyDataset)
    from tests.scenarios import toy_runner_cfg
    # One seed for every run: the Runner draws one otherwise, and the runs compared must
    # start from the same weights and data.
    cfg = toy_runner_cfg(f'{work_dir}/rank{rank}', pattern, hook=False,
                         randomness=dict(seed=0), **lines)
    runner = Runner.from_cfg(Config(cfg))
    runner.train()
    model = runner.model.module
    return dict(wrapper=type(runner.model).__name__,
                params={name: p.detach().clone() for name, p in model.named_parameters()})


def main() -> None:
    import mmdet3d_ddp_guard
    from mmengine.registry import MODEL_WRAPPERS
    result = dict(frameworks=mmdet3d_ddp_guard.FRAMEWORKS,
                  registered=MODEL_WRAPPERS.get('GuardedDDP') is getattr(
                      mmdet3d_ddp_guard, 'GuardedDDP', None),
                  report=subprocess.run([sys.executable, '-m', 'mmdet3d_ddp_guard', '--version'],
                                        capture_output=True, text=True).stdout)
    with tempfile.TemporaryDirectory() as work_dir:
        guarded = run_distributed(train, work_dir + '/guarded', 'rank_dependent', GUARD_LINES)
        reference = run_distributed(train, work_dir + '/reference', 'rank_dependent',
                                    dict(model_wrapper_cfg=MMENGINE_GRAPH_SEARCH))
        result['wrappers'] = [guarded[0]['wrapper'], reference[0]['wrapper']]
        result['same_params'] = [
            all(torch.equal(mine['params'][name], theirs['params'][name])
                for name in theirs['params']) and mine['params'].keys() == theirs['params'].keys()
            for mine, theirs in zip(guarded, reference)]
        try:
            run_distributed(train, work_dir + '/default', 'skip_odd',
                            dict(model_wrapper_cfg=MMENGINE_DEFAULT), timeout=120)
            result['without_the_lines'] = 'trained'
        except DistributedRunError as error:
            result['without_the_lines'] = str(error)
    print('FORM RESULT ' + json.dumps(result))


if __name__ == '__main__':
    main()
