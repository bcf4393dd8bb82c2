"""The mmdet3d zoo run: for every config mmdet3d 1.4.0 ships, does it need
``find_unused_parameters``, and would plain DDP fail or hang on 8 GPUs?

    .venv/bin/python benchmarks/zoo.py                 # run every pending config (resumable)
    .venv/bin/python benchmarks/zoo.py --only 'pointpillars/.*kitti' --commit
    .venv/bin/python benchmarks/zoo.py --classify      # rows without running anything
    .venv/bin/python benchmarks/zoo.py --render        # docs/zoo/README.md and the zoo
                                                       # section of docs/compatibility.md

For each config of mmdet3d's installed ``configs/`` folder (``mmdet3d/.mim/configs``):

1. Read it with MMEngine (inheritance resolved). ``_base_`` fragments, configs whose model
   needs a CUDA-only op (sparse convolution, DynamicScatter, the PointNet++ ops, ...) and
   ``-amp`` configs are ``skipped``, with the op; configs mmdet3d 1.4 cannot build at all
   are a ``limitation``, with the reason.
2. Otherwise point it at the tiny data (``data/tiny/zoo/<dataset>``, written first when
   missing, in mmdet3d's own on-disk formats), shrink it (``zoo_overrides.shrink``: smaller
   images, batch 1, no pretrained download, 2 iterations; the row's ``shrunk`` lists what),
   add the guard's config lines with ``find_unused_parameters = 'auto'``, and write it to
   ``work_dirs/zoo/<config>/``.
3. ``python -m mmdet3d_ddp_guard check <it> --world-size 8 --iters N`` in a subprocess: the
   unused parameters per simulated rank and iteration, and the predicted plain-DDP outcome.
4. A real 2-rank training of 2 iterations under GuardedDDP with UnusedParamsHook, through
   mmdet3d's own ``tools/train.py`` under torchrun (``launch.torchrun_train``).

One row per config in ``docs/zoo/zoo.json``, written after every config (a config already
done is skipped on the next run, so a stopped run resumes); ``docs/zoo/README.md`` and the
zoo section of docs/compatibility.md are rendered from it (``zoo_render``). ``--commit``
commits those three files after every row.
"""
import argparse
import datetime
import json
import os
import os.path as osp
import re
import statistics
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, osp.dirname(osp.abspath(__file__)))

import zoo_overrides  # noqa: E402
from zoo_render import (README_BEGIN, README_END, SECTION_PAGE, render,  # noqa: E402
                        update_readme, with_section)

ZOO_DIR = DEFAULT_ZOO_DIR = osp.join(REPO, 'docs', 'zoo')
PROJECT_README = osp.join(REPO, SECTION_PAGE)
ZOO_JSON = osp.join(ZOO_DIR, 'zoo.json')
ZOO_README = osp.join(ZOO_DIR, 'README.md')
DATA_ROOT = osp.join(REPO, 'data', 'tiny', 'zoo')
WORK_ROOT = osp.join(REPO, 'work_dirs', 'zoo')
#: Bumped when the way rows are computed changes: rows of another version are run again.
ZOO_VERSION = 1
DONE = ('ok', 'skipped', 'limitation')

# Failures that are not ours, recognised in a run's output: (pattern, status, reason).
KNOWN_LIMITATIONS = [
    (re.compile(r'(\w+) is not implemented on CPU'), 'limitation',
     'CUDA-only op found at run time: {0} is not implemented on CPU in mmcv 2.1.0'),
    (re.compile(r'Torch not compiled with CUDA enabled'), 'limitation',
     'CUDA-only code path found at run time (Torch not compiled with CUDA enabled)'),
    (re.compile(r"FileNotFoundError: .*?'?([\w./-]*configs/[\w./-]+\.py)'? (?:does not exist|"
                r'not found)'), 'limitation',
     'mmdet3d 1.4.0 ships this config with a missing base file ({0})'),
]


def mmdet3d_configs_dir() -> str:
    import mmdet3d
    return osp.join(osp.dirname(mmdet3d.__file__), '.mim', 'configs')


def all_configs(root: str) -> List[str]:
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith('.py'):
                found.append(osp.relpath(osp.join(folder, name), root))
    return sorted(found)


# ---------------------------------------------------------------------------------------
# Rows


def set_paths(out_dir: str = None, data_root: str = None, work_root: str = None) -> None:
    """Where the rows, the tiny data and the work dirs go (tests point them elsewhere)."""
    global ZOO_DIR, ZOO_JSON, ZOO_README, DATA_ROOT, WORK_ROOT
    if out_dir:
        ZOO_DIR = osp.abspath(out_dir)
        ZOO_JSON = osp.join(ZOO_DIR, 'zoo.json')
        ZOO_README = osp.join(ZOO_DIR, 'README.md')
    if data_root:
        DATA_ROOT = osp.abspath(data_root)
    if work_root:
        WORK_ROOT = osp.abspath(work_root)


def load_rows() -> Dict[str, Dict]:
    if not osp.isfile(ZOO_JSON):
        return {}
    with open(ZOO_JSON) as f:
        return {row['config']: row for row in json.load(f)}


def save_rows(rows: Dict[str, Dict], configs: List[str]) -> None:
    os.makedirs(ZOO_DIR, exist_ok=True)
    ordered = [rows[c] for c in configs if c in rows]
    ordered += [r for c, r in sorted(rows.items()) if c not in configs]
    tmp = ZOO_JSON + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(ordered, f, indent=1)
        f.write('\n')
    os.replace(tmp, ZOO_JSON)
    write_docs(ordered)


def write_docs(rows: List[Dict]) -> None:
    """docs/zoo/README.md, and docs/compatibility.md's zoo section when the rows are the
    project's."""
    os.makedirs(ZOO_DIR, exist_ok=True)
    with open(ZOO_README, 'w') as f:
        f.write(render(rows))
    if ZOO_DIR == DEFAULT_ZOO_DIR:
        update_readme(rows, PROJECT_README)


def base_row(config: str) -> Dict:
    return dict(config=config, family=config.split('/')[0], status='pending', reason='',
                unused={}, plain_ddp_8=None, sets_find_unused=None, needs_find_unused=None,
                guarded_ddp_trained=False, seconds_per_step=None, zoo_version=ZOO_VERSION)


def classify(config: str, root: str) -> Dict:
    """The row as far as reading the config tells: skipped, limitation, or pending."""
    row = base_row(config)
    if config.startswith('_base_/'):
        row.update(status='skipped', reason='a _base_ fragment (model, dataset, schedule or '
                   'runtime parts that the configs inherit), not a training config')
        return row
    from mmengine.config import Config
    try:
        cfg = Config.fromfile(osp.join(root, config))
    except Exception as error:  # noqa: BLE001 - the row records it
        # The configs folder's place on this machine says nothing to a reader of the row.
        message = _one_line(error).replace(osp.join(root, ''), 'configs/')
        row.update(status='limitation', built=False, error=message, reason=(
            f'mmdet3d 1.4.0 ships this config broken: MMEngine cannot read it ({message})'))
        return row
    row['sets_find_unused'] = cfg.get('find_unused_parameters', False) is True
    row['datasets'] = zoo_overrides.dataset_types(cfg)
    verdict = zoo_overrides.preflight(cfg)
    if verdict:
        row.update(status=verdict[0], reason=verdict[1])
    return row


def _one_line(error) -> str:
    text = f'{type(error).__name__}: {error}'.replace('\n', ' ')
    return text if len(text) < 300 else text[:297] + '...'


def explain(output: str):
    """(status, reason) for a failure we know is not ours, else None."""
    for pattern, status, reason in KNOWN_LIMITATIONS:
        match = pattern.search(output)
        if match:
            return status, reason.format(*match.groups())
    return None


# ---------------------------------------------------------------------------------------
# Running one config


def ensure_data(kinds: List[str]) -> None:
    from tests.tiny_data.tiny_zoo import make_zoo_data
    wanted = [zoo_overrides.TINY_DATASETS[k] for k in kinds]
    missing = [name for name in wanted
               if not osp.isfile(osp.join(DATA_ROOT, name, '.complete'))]
    if missing:
        print(f'  writing tiny data: {", ".join(missing)}', flush=True)
        make_zoo_data(DATA_ROOT, missing)


def write_config(config: str, root: str, image_factor: float, train_iters: int):
    """The zoo's version of ``config``: its path and what was shrunk."""
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(root, config))
    shrunk = zoo_overrides.shrink(cfg, DATA_ROOT, image_factor, train_iters)
    zoo_overrides.guard_lines(cfg)
    work_dir = osp.join(WORK_ROOT, config[:-3].replace('/', '__'))
    os.makedirs(work_dir, exist_ok=True)
    path = osp.join(work_dir, 'zoo_' + osp.basename(config))
    cfg.dump(path)
    return path, work_dir, shrunk


def run_check(path: str, work_dir: str, world_size: int, iters: int, timeout: float) -> Dict:
    out_json = osp.join(work_dir, 'check.json')
    if osp.exists(out_json):
        os.remove(out_json)
    command = ['nice', '-n', '10', sys.executable, '-m', 'mmdet3d_ddp_guard', 'check', path,
               '--world-size', str(world_size), '--iters', str(iters), '--json', out_json,
               '--work-dir', osp.join(work_dir, 'check')]
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
        output, code, timed_out = done.stdout, done.returncode, False
    except subprocess.TimeoutExpired as error:
        output = error.stdout or ''
        output = output.decode() if isinstance(output, bytes) else output
        code, timed_out = None, True
    seconds = time.monotonic() - start
    with open(osp.join(work_dir, 'check.log'), 'w') as f:
        f.write(output)
    result = dict(seconds=seconds, code=code, timed_out=timed_out, output=output)
    if code in (0, 1) and osp.isfile(out_json):
        with open(out_json) as f:
            result['prediction'] = json.load(f)
    return result


_DECISION = re.compile(r"GuardedDDP decision \(([^)]*)\): mode='(\w+)'")
_ITER_TIME = re.compile(r'Iter\(train\) \[\s*(\d+)/(\d+)\].*?\btime: ([0-9.]+)')
_SUMMARY = re.compile(r'(\d+) of (\d+) parameters were unused at least once')


def run_training(path: str, work_dir: str, nproc: int, iters: int, timeout: float) -> Dict:
    from demo.launch import torchrun_train
    train_dir = osp.join(work_dir, 'train')
    os.makedirs(train_dir, exist_ok=True)
    # The workers run mmdet3d's tools/train.py, whose folder, not this checkout, heads their
    # sys.path; the venv's editable install may point at another checkout that shares the
    # venv store (make_venv.sh), so the checkout under test goes first explicitly.
    pythonpath = os.pathsep.join(p for p in (REPO, os.environ.get('PYTHONPATH')) if p)
    run = torchrun_train(path, train_dir, nproc=nproc, timeout=timeout,
                         env={'PYTHONPATH': pythonpath})
    with open(osp.join(work_dir, 'train.log'), 'w') as f:
        f.write(run.output)
    times = [(int(i), float(t)) for i, _, t in _ITER_TIME.findall(run.output)]
    decisions = _DECISION.findall(run.output)
    summary = _SUMMARY.findall(run.output)
    finished = (run.returncode == 0 and not run.timed_out
                and any(i == iters for i, _ in times))
    return dict(
        trained=finished, seconds=run.seconds, code=run.returncode, timed_out=run.timed_out,
        output=run.output,
        # MMEngine's per-iteration time; the first includes warm-up, so the later ones.
        seconds_per_step=(statistics.median([t for i, t in times if i > 1] or
                                            [t for _, t in times]) if times else None),
        decision=(f"mode='{decisions[-1][1]}' ({decisions[-1][0]})" if decisions else None),
        unused_in_training=(int(summary[-1][0]) if summary else None),
        num_params=(int(summary[-1][1]) if summary else None))


def unused_fractions(prediction: Dict):
    """name -> fraction of simulated rank-iterations in which it was unused, and the ranks."""
    per_iteration = prediction['per_iteration']
    total = sum(len(line['unused_per_rank']) for line in per_iteration)
    counts: Dict[str, int] = {}
    ranks: Dict[str, set] = {}
    for line in per_iteration:
        for rank, names in enumerate(line['unused_per_rank']):
            for name in names:
                counts[name] = counts.get(name, 0) + 1
                ranks.setdefault(name, set()).add(rank)
    return ({name: round(count / total, 4) for name, count in sorted(counts.items())},
            {name: sorted(r) for name, r in sorted(ranks.items())})


#: Source lines of RankSimulation (and Config) that a traceback shows when the config's
#: model, data or optimizer could not be built.
_BUILD_FRAMES = ('self.model = MODELS.build', 'dataset = DATASETS.build',
                 'build_optim_wrapper(self.model', 'Config.fromfile', 'cfg.merge_from_dict')


def _built(output: str) -> bool:
    """Whether the check got past building the config's model, data and optimizer."""
    if 'Traceback' not in output:
        return 'SimulationError' not in output and 'check: ' not in output
    return not any(frame in output for frame in _BUILD_FRAMES)


def _tail(text: str, lines: int = 25) -> str:
    return '\n'.join(text.rstrip().splitlines()[-lines:])


#: torchrun's own report of a failed worker, printed after the workers' tracebacks; it
#: names the rank and exit code but not the error.
_TORCHRUN_REPORT = re.compile(r'^.*torch/distributed/elastic/multiprocessing/api\.py',
                              re.MULTILINE)


def _workers_error(output: str, lines: int = 40) -> str:
    """The end of what the workers printed before torchrun's report of their failure."""
    report = _TORCHRUN_REPORT.search(output)
    return _tail(output[:report.start()] if report else output, lines)


def run_row(row: Dict, root: str, args) -> Dict:
    """Builds, checks and trains one config; returns the finished row."""
    config = row['config']
    row = dict(row, status='error', reason='', zoo_version=ZOO_VERSION,
               world_size=args.world_size, iters_simulated=args.iters,
               train_ranks=args.train_ranks, train_iters=args.train_iters)
    started = time.monotonic()
    try:
        ensure_data(row.get('datasets') or [])
        factor = args.image_factor or zoo_overrides.image_factor_for(config)
        path, work_dir, shrunk = write_config(config, root, factor, args.train_iters)
    except Exception as error:  # noqa: BLE001 - the row records it
        row.update(built=False, error=traceback.format_exc()[-3000:],
                   reason=f'the zoo could not prepare it: {_one_line(error)}')
        return row
    row['shrunk'] = shrunk
    print(f'  check --world-size {args.world_size} --iters {args.iters} ...', flush=True)
    check = run_check(path, work_dir, args.world_size, args.iters, args.check_timeout)
    row['check_seconds'] = round(check['seconds'], 1)
    if 'prediction' not in check:
        row['built'] = _built(check['output'])
        known = explain(check['output'])
        what = 'timed out' if check['timed_out'] else f'exited {check["code"]}'
        row['error'] = f'check {what}:\n' + _tail(check['output'])
        if known:
            row.update(status=known[0], reason=known[1])
        else:
            row['reason'] = f'check {what}: unexplained (see error)'
        return row
    row['built'] = True
    prediction = check['prediction']
    row['unused'], row['unused_ranks'] = unused_fractions(prediction)
    row['plain_ddp_8'] = prediction['plain_ddp']['outcome']
    row['static_graph_8'] = prediction['static_graph']['outcome']
    lines = prediction['per_iteration']
    row['needs_find_unused'] = any(line['outcome'] == 'fails' for line in lines) or (
        row['plain_ddp_8'] == 'hangs' and bool(row['unused']))
    row['seconds_per_rank_step_check'] = round(
        check['seconds'] / (args.iters * args.world_size), 2)
    if args.no_train:
        row.update(status='pending', reason='checked; the 2-rank training is still to run')
        return row
    print(f'  GuardedDDP training, {args.train_ranks} ranks x {args.train_iters} '
          'iterations ...', flush=True)
    train = run_training(path, work_dir, args.train_ranks, args.train_iters,
                         args.train_timeout)
    row.update(guarded_ddp_trained=train['trained'],
               guarded_ddp_decision=train['decision'],
               unused_in_training=train['unused_in_training'],
               num_params=train['num_params'],
               seconds_per_step=(round(train['seconds_per_step'], 2)
                                 if train['seconds_per_step'] is not None else None),
               train_seconds=round(train['seconds'], 1))
    if not train['trained']:
        known = explain(train['output'])
        what = 'timed out' if train['timed_out'] else f'exited {train["code"]}'
        row['error'] = f'GuardedDDP training {what}:\n' + _workers_error(train['output'])
        if known:
            row.update(status=known[0], reason=known[1])
        else:
            row['reason'] = f'GuardedDDP training {what}: unexplained (see error)'
        return row
    row.update(status='ok', reason='', row_seconds=round(time.monotonic() - started, 1))
    return row


def probe(configs: List[str], root: str, args) -> int:
    """Builds each config's shrunk train dataset and loads two samples through its
    pipeline: data-format problems show here in seconds, not after a model is built."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    failed = 0
    for config in configs:
        try:
            cfg = Config.fromfile(osp.join(root, config))
            ensure_data(zoo_overrides.dataset_types(cfg))
            zoo_overrides.shrink(cfg, DATA_ROOT, args.image_factor or
                                 zoo_overrides.image_factor_for(config), args.train_iters)
            init_default_scope(cfg.get('default_scope') or 'mmdet3d')
            from mmdet3d.registry import DATASETS
            dataset = DATASETS.build(cfg.train_dataloader.dataset)
            described = []
            for index in range(2):
                sample = dataset[index]
                inputs, data = sample['inputs'], sample['data_samples']
                shapes = {k: tuple(getattr(v, 'shape', ())) or len(v)
                          for k, v in inputs.items()}
                boxes = len(data.gt_instances_3d) if 'gt_instances_3d' in data else 0
                boxes_2d = len(data.gt_instances) if 'gt_instances' in data else 0
                described.append(f'{shapes} 3D boxes {boxes} 2D boxes {boxes_2d}')
            print(f'ok   {config}: {len(dataset)} samples; ' + ' | '.join(described),
                  flush=True)
        except Exception:  # noqa: BLE001 - reported
            failed += 1
            print(f'FAIL {config}:\n{traceback.format_exc()[-2500:]}', flush=True)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------


def git_commit(message: str) -> None:
    """Commits the rows and what is rendered from them only (by path), retrying a held index
    lock. The section's page goes in only when nothing but its zoo section differs from the
    last commit: someone's edit in progress there is not swept into a zoo commit."""
    paths = [osp.relpath(p, REPO) for p in (ZOO_JSON, ZOO_README)]
    if _only_zoo_section_changed(PROJECT_README):
        paths.append(osp.relpath(PROJECT_README, REPO))
    else:
        print(f'  {SECTION_PAGE} has other uncommitted changes: its zoo section is left for '
              'you to commit', flush=True)
    for attempt in range(30):
        if osp.exists(osp.join(REPO, '.git', 'index.lock')):
            time.sleep(2)
            continue
        add = subprocess.run(['git', 'add', '--', *paths], cwd=REPO, capture_output=True,
                             text=True)
        done = subprocess.run(['git', 'commit', '-q', '-m', message, '--', *paths],
                              cwd=REPO, capture_output=True, text=True) \
            if add.returncode == 0 else add
        if done.returncode == 0 or 'nothing to commit' in done.stdout + done.stderr:
            return
        if 'index.lock' not in done.stderr:
            print(f'  git commit failed: {done.stderr.strip()}', flush=True)
            return
        time.sleep(2)


def _only_zoo_section_changed(readme: str) -> bool:
    committed = subprocess.run(['git', 'show', f'HEAD:{osp.relpath(readme, REPO)}'],
                               cwd=REPO, capture_output=True, text=True)
    with open(readme) as f:
        current = f.read()
    if committed.returncode != 0 or README_BEGIN not in current:
        return False
    section = current[current.index(README_BEGIN):current.index(README_END) + len(README_END)]
    return with_section(committed.stdout, section) == current


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--only', default=None, metavar='REGEX',
                        help='configs (relative path) matching this regular expression')
    parser.add_argument('--limit', type=int, default=None, help='run at most N configs')
    parser.add_argument('--redo', action='store_true', help='run configs already done')
    parser.add_argument('--classify', action='store_true',
                        help='only read the configs: skipped / limitation / pending rows')
    parser.add_argument('--render', action='store_true',
                        help='only render docs/zoo/README.md from docs/zoo/zoo.json')
    parser.add_argument('--world-size', type=int, default=8)
    parser.add_argument('--iters', type=int, default=2,
                        help='iterations simulated by check (default 2)')
    parser.add_argument('--train-ranks', type=int, default=2)
    parser.add_argument('--train-iters', type=int, default=2)
    parser.add_argument('--image-factor', type=float, default=None,
                        help='resize images to this fraction of the config\'s size (default: '
                        f'{zoo_overrides.IMAGE_FACTOR}, or the family\'s in zoo_overrides)')
    parser.add_argument('--no-train', action='store_true',
                        help='check only; the rows stay pending for the training')
    parser.add_argument('--check-timeout', type=float, default=1800)
    parser.add_argument('--train-timeout', type=float, default=1200)
    parser.add_argument('--deadline', type=float, default=None, metavar='SECONDS',
                        help='start no config after this many seconds')
    parser.add_argument('--commit', action='store_true',
                        help='git commit docs/zoo/ after every row')
    parser.add_argument('--out', default=None,
                        help='folder of zoo.json and README.md (default: docs/zoo)')
    parser.add_argument('--data-root', default=None,
                        help='tiny data (default: data/tiny/zoo, written when missing)')
    parser.add_argument('--configs-dir', default=None,
                        help="mmdet3d's configs folder (default: the installed mmdet3d's "
                        '.mim/configs)')
    parser.add_argument('--probe', action='store_true',
                        help='only build the shrunk train datasets and load 2 samples each')
    parser.add_argument('--work-root', default=None,
                        help='configs and logs of the runs (default: work_dirs/zoo)')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    set_paths(args.out, args.data_root, args.work_root)
    rows = load_rows()
    if args.render:
        write_docs(list(rows.values()))
        print(f'Wrote {ZOO_README}')
        return 0
    root = args.configs_dir or mmdet3d_configs_dir()
    configs = all_configs(root)
    # Classify what is new or stale (reading configs only: about a minute for all).
    for config in configs:
        if args.only is not None and not re.search(args.only, config):
            continue
        row = rows.get(config)
        # Pending rows too: a rule added to zoo_overrides may now skip them.
        if (row is None or row.get('zoo_version') != ZOO_VERSION or args.redo
                or row['status'] == 'pending'):
            rows[config] = classify(config, root)
    save_rows(rows, configs)
    if args.classify:
        print(f'Classified {len(configs)} configs: ' + ', '.join(
            f'{sum(r["status"] == s for r in rows.values())} {s}'
            for s in ('pending', 'ok', 'skipped', 'limitation', 'error')))
        return 0
    todo = [c for c in configs if c in rows and rows[c]['status'] in ('pending', 'error')
            and (args.only is None or re.search(args.only, c))]
    if args.limit is not None:
        todo = todo[:args.limit]
    if args.probe:
        return probe(todo, root, args)
    start = time.monotonic()
    print(f'{len(todo)} configs to run (of {len(configs)}); rows in {ZOO_JSON}', flush=True)
    for index, config in enumerate(todo, 1):
        if args.deadline and time.monotonic() - start > args.deadline:
            print(f'Deadline reached: {len(todo) - index + 1} configs left for a later run.')
            break
        print(f'[{index}/{len(todo)}] {config}', flush=True)
        t0 = time.monotonic()
        row = run_row(rows[config], root, args)
        row['finished_at'] = datetime.datetime.utcnow().strftime('%Y-%m-%dT%H:%M:%SZ')
        row['row_seconds'] = round(time.monotonic() - t0, 1)
        rows[config] = row
        save_rows(rows, configs)
        print(f'  -> {row["status"]}: plain DDP on {args.world_size}: {row["plain_ddp_8"]}, '
              f'{len(row["unused"])} unused, trained: {row["guarded_ddp_trained"]}, '
              f'{row["row_seconds"]:.0f} s' + (f'  ({row["reason"]})' if row['reason']
                                                else ''), flush=True)
        if args.commit and ZOO_DIR == osp.join(REPO, 'docs', 'zoo'):
            git_commit(f'zoo: {config}: {row["status"]}')
    print(f'Zoo run: {time.monotonic() - start:.0f} s.')
    return 0


if __name__ == '__main__':
    sys.exit(main())
