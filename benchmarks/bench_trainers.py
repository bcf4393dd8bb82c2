"""Step time of the guard's 'auto' against plain DDP and DDP's graph search on a transformer,
in a plain loop and under the trainers that build DDP themselves, in one run.

Run under torchrun (2 gloo ranks, one thread each, on the CPU) where transformers (and, for
``--trainers lightning``, Lightning) is installed (the ``pytorch`` leg's venv):

    .venvs/pytorch/bin/python -m torch.distributed.run --nproc_per_node 2 \\
        benchmarks/bench_trainers.py

On GPUs, one rank per GPU with NCCL (``benchmarks/device_check.sh`` runs it so): ``--device
cuda``; a step's time then ends when the GPU has finished it (``torch.cuda.synchronize``).

The model is transformers' ``GPT2LMHeadModel`` built from its config (``--layers`` layers,
n_embd 256, 4 heads, a 2048-token vocabulary), trained on 4x64 tokens with AdamW; it has no
unused parameter, so plain DDP trains it and every difference is a wrapper's own cost. The
wrappers take turns (interleaved rounds of ``--steps`` steps, each round starting one wrapper
later than the round before, so that none always runs first or after the same one), in each of:

- ``loop``: a plain loop: ``DistributedDataParallel(model)``, ``DistributedDataParallel(model,
  find_unused_parameters=True)`` and ``GuardedDDP(model, stall_timeout=None)``, built once,
  and plain DDP with torch's Python ``allreduce_hook`` (what any Python comm hook costs: the
  guard reduces the buckets through one), and plain DDP with one small all-reduce of its own
  a step (the guard's counts' size, issued without waiting after the backward, waited after
  the optimizer step: what a design without a comm hook, with the counts beside the buckets,
  would cost in collectives);
- ``hf``: the Hugging Face Trainer, a new one each round: ``ddp_find_unused_parameters=False``,
  the Trainer's default (True for a ``PreTrainedModel`` without checkpointing), and the default
  inside ``with guard_ddp_builds(stall_timeout=None):``; a step is timed from the Trainer's
  ``on_step_begin`` to ``on_step_end``;
- ``lightning``: ``DDPStrategy()``, ``DDPStrategy(find_unused_parameters=True)`` and
  ``GuardedDDPStrategy(stall_timeout=None)``, a new Trainer each round; a step is timed from
  ``on_train_batch_start`` to ``on_train_batch_end``.

In each, a second plain DDP (``plain DDP again``: another model, another turn) is the
control: it does exactly what plain DDP does, so its ratio to plain DDP is what the run cannot
tell apart (the machine's drift, the model's place in memory, the turn). Rank 0 prints each
wrapper's median step (over rounds, of a round's median step) and its ratio to plain DDP and
to the graph search, each the median over rounds of that round's ratio (paired: a round's
wrappers ran within seconds of each other).
``--profile`` then runs one more round of each of the plain loop's wrappers under cProfile
(every rank; it slows them, so the timing is done first), and rank 0 prints where the
guard's own Python work and the comm hooks' go, per step (cumulative times; the profiler
inflates small calls, so they are upper bounds).
"""
import argparse
import cProfile
import io
import os
import pstats
import re
import statistics
import tempfile
import time
from typing import Callable, Dict, List

import repo_root  # noqa: F401,I100 (the checkout importable)
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard.environment.cpu_ddp import leave_gloo_cleanly

PLAIN, SEARCH, GUARDED = 'plain DDP', 'graph search', "guard 'auto'"
#: The control: plain DDP again, whose ratio to plain DDP is the run's resolution.
PLAIN_AGAIN = 'plain DDP again'
#: Plain DDP with torch's Python all-reduce hook: what any Python comm hook costs (the guard
#: reduces the buckets through one, which carries the counts).
PLAIN_PYTHON_HOOK = 'plain + hook'
#: Plain DDP and one small all-reduce a step: the collectives of the counts sent beside the
#: buckets instead of on the last (docs/trainers.md#cost-on-a-transformer).
PLAIN_SMALL_ALL_REDUCE = 'plain + counts'
#: The plain loop's wrappers that ``--profile`` profiles.
PROFILED_WRAPPERS = (PLAIN, SEARCH, GUARDED, PLAIN_PYTHON_HOOK)


def gpt2(layers: int):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=256, n_head=4, vocab_size=2048,
                                       n_positions=128))
    return model.train()


def clock(device: torch.device) -> float:
    """Seconds, once ``device`` has finished the work queued on it (a CUDA step ends on the
    GPU, not when the host has queued it)."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    return time.perf_counter()


def tokens(rank: int, step: int) -> torch.Tensor:
    return torch.randint(2048, (4, 64), generator=torch.Generator().manual_seed(rank * 1000
                                                                                + step))


def loop_round(layers: int, steps: int,
               device: torch.device) -> Callable[[str], List[float]]:
    """The plain loop's wrappers, built once; a round of ``steps`` steps of one of them."""
    from mmdet3d_ddp_guard.pytorch import GuardedDDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    placement = dict(device_ids=[device.index]) if device.type == 'cuda' else {}

    def plain_with_python_hook(model):
        wrapper = DistributedDataParallel(model, **placement)
        wrapper.register_comm_hook(None, default_hooks.allreduce_hook)
        return wrapper
    build = {PLAIN: lambda m: DistributedDataParallel(m, **placement),
             PLAIN_AGAIN: lambda m: DistributedDataParallel(m, **placement),
             SEARCH: lambda m: DistributedDataParallel(m, find_unused_parameters=True,
                                                       **placement),
             GUARDED: lambda m: GuardedDDP(m, stall_timeout=None, **placement),
             PLAIN_PYTHON_HOOK: plain_with_python_hook,
             PLAIN_SMALL_ALL_REDUCE: lambda m: DistributedDataParallel(m, **placement)}
    runs = {}
    for name, wrap in build.items():
        model = wrap(gpt2(layers).to(device))
        runs[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    # One count per parameter and the unreached flag, as the guard's counts of one step.
    counts = torch.zeros(len(list(runs[PLAIN][0].parameters())) + 1, device=device)

    def one_round(name: str) -> List[float]:
        model, optimizer = runs[name]
        times = []
        for step in range(steps):
            ids = tokens(dist.get_rank(), step).to(device)
            start = clock(device)
            model(input_ids=ids, labels=ids).loss.backward()
            counted = (dist.all_reduce(counts, async_op=True)
                       if name == PLAIN_SMALL_ALL_REDUCE else None)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if counted is not None:
                counted.wait()
            times.append(clock(device) - start)
        return times
    return one_round


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, count: int):
        self.count = count

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        ids = tokens(dist.get_rank(), index)[0]
        return dict(input_ids=ids, labels=ids)


def hf_round(layers: int, steps: int, device: torch.device) -> Callable[[str], List[float]]:
    """A new Hugging Face Trainer per round, on ``steps`` steps of 4x64 tokens per rank."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from mmdet3d_ddp_guard.pytorch import guard_ddp_builds

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times, self.start = [], 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = clock(device)

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(clock(device) - self.start)

    def one_round(name: str) -> List[float]:
        recorder = StepTimes()
        with tempfile.TemporaryDirectory() as out:
            arguments = TrainingArguments(
                output_dir=out, use_cpu=device.type == 'cpu', ddp_backend=dist.get_backend(),
                per_device_train_batch_size=4,
                max_steps=steps, learning_rate=1e-4, report_to=[], save_strategy='no',
                logging_strategy='no', disable_tqdm=True, seed=0, dataloader_num_workers=0,
                ddp_find_unused_parameters=False if name in (PLAIN, PLAIN_AGAIN) else None)
            trainer = Trainer(model=gpt2(layers), args=arguments,
                              train_dataset=_Tokens(4 * steps), callbacks=[recorder])
            if name == GUARDED:
                with guard_ddp_builds(stall_timeout=None):
                    trainer.train()
            else:
                trainer.train()
        return recorder.times
    return one_round


def lightning_round(layers: int, steps: int,
                    device: torch.device) -> Callable[[str], List[float]]:
    """A new Lightning Trainer per round, on ``steps`` batches of 4x64 tokens per rank."""
    import lightning.pytorch as pl

    from mmdet3d_ddp_guard.lightning import GuardedDDPStrategy

    class LanguageModel(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = gpt2(layers)

        def training_step(self, ids, index):
            return self.model(input_ids=ids, labels=ids).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class StepTimes(pl.Callback):
        def __init__(self):
            self.times, self.start = [], 0.0

        def on_train_batch_start(self, trainer, module, batch, index):
            self.start = clock(device)

        def on_train_batch_end(self, trainer, module, outputs, batch, index):
            self.times.append(clock(device) - self.start)

    strategies = {PLAIN: lambda: pl.strategies.DDPStrategy(),
                  PLAIN_AGAIN: lambda: pl.strategies.DDPStrategy(),
                  SEARCH: lambda: pl.strategies.DDPStrategy(find_unused_parameters=True),
                  GUARDED: lambda: GuardedDDPStrategy(stall_timeout=None)}

    def one_round(name: str) -> List[float]:
        recorder = StepTimes()
        loader = torch.utils.data.DataLoader(
            [tokens(dist.get_rank(), step)[0] for step in range(4 * steps)], batch_size=4)
        trainer = pl.Trainer(accelerator='gpu' if device.type == 'cuda' else 'cpu',
                             devices=dist.get_world_size(),
                             strategy=strategies[name](), max_steps=steps, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, use_distributed_sampler=False,
                             callbacks=[recorder])
        trainer.fit(LanguageModel(), loader)
        return recorder.times
    return one_round


#: The functions whose cumulative time the profile prints: the guard's, and the comm hooks'.
PROFILED = 'mmdet3d_ddp_guard|ddp_comm_hooks'


def profile_round(one_round: Callable[[str], List[float]], name: str, steps: int) -> None:
    """One round of ``name`` under cProfile on every rank; rank 0 prints the :data:`PROFILED`
    functions by cumulative time, in ms per step."""
    profiler = cProfile.Profile()
    dist.barrier()
    profiler.enable()
    one_round(name)
    profiler.disable()
    if dist.get_rank() != 0:
        return
    stats = pstats.Stats(profiler, stream=io.StringIO())
    profiled = {key: value for key, value in stats.stats.items() if re.search(PROFILED, key[0])}
    rows = [(cumulative / steps * 1000, calls / steps,
             f'{_from_package(path)}:{line}({function})')
            for (path, line, function), (_, calls, _, cumulative, _) in profiled.items()]
    own = sum(own_time for _, _, own_time, _, _ in profiled.values()) / steps * 1000
    print(f'  profile of {name}, ms per step (cumulative), calls per step; their own lines '
          f'(self time) {own:.2f} ms per step:', flush=True)
    for milliseconds, calls, where in sorted(rows, reverse=True)[:12]:
        print(f'    {milliseconds:7.2f} ms {calls:6.0f}  {where}', flush=True)


def _from_package(path: str) -> str:
    return re.sub(r'.*/(mmdet3d_ddp_guard|torch)/', r'\1/', path)


def describe(device: torch.device) -> str:
    if device.type == 'cuda':
        return f'cuda ({torch.cuda.get_device_name(device)})'
    return 'cpu'


SETTINGS = {'loop': loop_round, 'hf': hf_round, 'lightning': lightning_round}


def paired_ratio(seconds: List[float], reference: List[float]) -> float:
    """The median over rounds of a round's step against the reference's in the same round."""
    return statistics.median(mine / theirs for mine, theirs in zip(seconds, reference))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--trainers', nargs='+', default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument('--layers', type=int, default=6)
    parser.add_argument('--rounds', type=int, default=12)
    parser.add_argument('--steps', type=int, default=5)
    parser.add_argument('--device', choices=('cpu', 'cuda'), default='cpu',
                        help='cuda: one rank per GPU, NCCL')
    parser.add_argument('--profile', action='store_true',
                        help="after the timing, profile a round of each of the plain loop's "
                        'wrappers (cProfile)')
    args = parser.parse_args()
    if args.device == 'cuda':
        device = torch.device('cuda', int(os.environ.get('LOCAL_RANK', 0)))
        torch.cuda.set_device(device)
        dist.init_process_group('nccl')
    else:
        device = torch.device('cpu')
        torch.set_num_threads(1)
        dist.init_process_group('gloo')
    for setting in args.trainers:
        one_round = SETTINGS[setting](args.layers, args.steps, device)
        names = ((PLAIN, SEARCH, GUARDED, PLAIN_AGAIN)
                 + ((PLAIN_PYTHON_HOOK, PLAIN_SMALL_ALL_REDUCE) if setting == 'loop' else ()))
        for name in names:  # warm-up
            one_round(name)
        medians: Dict[str, List[float]] = {name: [] for name in names}
        for turn in range(args.rounds):
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                dist.barrier()
                medians[name].append(statistics.median(one_round(name)))
        if dist.get_rank() == 0:
            print(f'{setting}: GPT-2 {args.layers} layers, {args.rounds} interleaved rounds of '
                  f'{args.steps} steps, {dist.get_world_size()} ranks, {dist.get_backend()}, '
                  f'{describe(device)}, torch {torch.__version__}; median step:', flush=True)
            for name, seconds in medians.items():
                print(f'  {name:15s} {statistics.median(seconds) * 1000:7.1f} ms  '
                      f'{paired_ratio(seconds, medians[PLAIN]):.3f}x plain DDP  '
                      f'{paired_ratio(seconds, medians[SEARCH]):.3f}x the graph search',
                      flush=True)
        if args.profile and setting == 'loop':
            for name in PROFILED_WRAPPERS:
                profile_round(one_round, name, args.steps)
    leave_gloo_cleanly()  # the wrappers outlive the group: see the function


if __name__ == '__main__':
    main()
