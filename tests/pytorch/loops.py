"""Plain PyTorch training loops, as users write them around torch's DDP, run on each rank by
the tests of :mod:`tests.pytorch`: the same loop under GuardedDDP and under a reference
wrapper, side by side in one process group, so that every rank's weights, buffers, optimizer
state and ``None`` gradients can be compared bit for bit.

A loop's ``style`` names what it adds to the plain step: ``amp`` (bf16 autocast and a
GradScaler), ``compile`` (the model compiled before it is wrapped), ``ema`` (a deep copy of
the wrapper kept as an exponential moving average of ``model.module.state_dict()``),
``save`` (``torch.save`` of the wrapper and of ``model.module.state_dict()`` after every
step, the training then going on from what was loaded back), ``sampler`` (batches drawn
through ``DistributedSampler`` and a ``DataLoader``, reshuffled each epoch), ``join``
(uneven inputs: rank 0 runs out of batches after two steps, inside ``model.join()``, while
rank 1 leaves a head unused), ``clip`` (``clip_grad_norm_`` between the backward and the
optimizer step, which reads every gradient). A loop's ``output`` (tests.pytorch.scale_detector's
OUTPUTS) is what the model returns: the loss, or its predictions for the loop to compute the
loss from.
"""
import copy
import io
from typing import Callable, Dict, List, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from mmdet3d_ddp_guard.pytorch import GuardedDDP
from tests.dist_utils import TRUSTED_LOAD
from tests.pytorch.scale_detector import ScaleDetector, batch, scale_loss, unpacked

#: torch's CPU GradScaler (torch >= 2.3), which the ``amp`` loop needs here.
CPU_GRAD_SCALER = hasattr(torch, 'amp') and hasattr(torch.amp, 'GradScaler')
STYLES = ('plain', 'amp', 'compile', 'ema', 'save', 'sampler', 'join')
#: What ``torch.compile`` runs in the tests: AOTAutograd's compiled forward and backward
#: (the graphs DDP's hooks and the guard's meet), without Inductor's C++ build, minutes on 2
#: cores.
COMPILE_BACKEND = 'aot_eager'


def fresh_model(seed: int = 0, output: str = 'loss') -> ScaleDetector:
    torch.manual_seed(seed)
    return ScaleDetector(output=output)


def graph_search(model, **kwargs):
    return DistributedDataParallel(model, find_unused_parameters=True, **kwargs)


def guarded(model, **kwargs):
    return GuardedDDP(model, **kwargs)


class _Batches(Dataset):
    """Iteration ``i``'s batch of each rank's data, as a dataset whose sample ``i`` is it:
    the sampler decides which rank trains on which (the rank's index of the sample)."""

    def __init__(self, length: int):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        images, targets = batch(index % 2, index // 2)
        return images, [t if t is not None else torch.empty(0) for t in targets]


def _targets(targets):
    return [None if t is None or t.numel() == 0 else t for t in targets]


class Run:
    """One wrapped model in one loop style, its AdamW and what it recorded."""

    def __init__(self, wrap: Callable, style: str = 'plain', output: str = 'loss', **kwargs):
        module = fresh_model(output=output)
        if style == 'compile':
            module = torch.compile(module, backend=COMPILE_BACKEND)
        self.wrap, self.style, self.output = wrap, style, output
        self.model = wrap(module, **kwargs)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.01,
                                           weight_decay=0.05)
        self.scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 8) \
            if style == 'amp' else None
        self.ema = copy.deepcopy(self.model) if style == 'ema' else None
        #: Per optimizer step, the names whose grad was None before it, the gradients it
        #: stepped with and its micro-steps' losses.
        self.none_grads: List[List[str]] = []
        self.grads: List[Dict[str, torch.Tensor]] = []
        self.losses: List[float] = []

    def step(self, rank: int, batches: Sequence, accumulate: int = 1) -> None:
        """One optimizer step over the micro-batches ``batches`` (``no_sync`` for all but
        the last), the loss divided as users do."""
        for micro, (images, targets) in enumerate(batches):
            syncing = micro == len(batches) - 1
            with (self.model.no_sync() if not syncing else _Nothing()):
                with (torch.autocast('cpu', dtype=torch.bfloat16) if self.scaler
                      else _Nothing()):
                    loss = self._loss(images, _targets(targets)) / accumulate
                (self.scaler.scale(loss) if self.scaler else loss).backward()
                self.losses.append(loss.item())
        self.none_grads.append(sorted(name for name, p in self._named_parameters()
                                      if p.grad is None))
        if self.style == 'clip':
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=0.5)
        self.grads.append({name: p.grad.clone() for name, p in self._named_parameters()
                           if p.grad is not None})
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            with torch.no_grad():
                for average, now in zip(self.ema.module.state_dict().values(),
                                        self.model.module.state_dict().values()):
                    if average.dtype.is_floating_point:
                        average.mul_(0.9).add_(now, alpha=0.1)
        if self.style == 'save':
            self._save_and_go_on_from_what_was_loaded()

    def _loss(self, images, targets):
        if self.output == 'loss':
            return self.model(images, targets)
        return scale_loss(unpacked(self.model(images), self.output), targets)

    def _named_parameters(self):
        return self.model.module.named_parameters()

    def _save_and_go_on_from_what_was_loaded(self) -> None:
        """A checkpoint as users write one (the whole wrapper, and the module's weights
        with the optimizer's), then training goes on from what was loaded back."""
        whole, weights = io.BytesIO(), io.BytesIO()
        torch.save(self.model, whole)
        torch.save(dict(model=self.model.module.state_dict(),
                        optimizer=self.optimizer.state_dict()), weights)
        whole.seek(0)
        weights.seek(0)
        copied = torch.load(whole, **TRUSTED_LOAD)
        assert type(copied) is type(self.model)
        checkpoint = torch.load(weights, **TRUSTED_LOAD)
        self.model.module.load_state_dict(checkpoint['model'])
        self.optimizer.load_state_dict(checkpoint['optimizer'])
        for mine, theirs in zip(copied.module.state_dict().values(),
                                self.model.module.state_dict().values()):
            assert torch.equal(mine, theirs)

    def state(self) -> Dict:
        module = self.model.module
        state = dict(params={k: v.detach().clone() for k, v in module.named_parameters()},
                     buffers={k: v.clone() for k, v in module.named_buffers()},
                     optimizer_state=copy.deepcopy(self.optimizer.state_dict()['state']),
                     none_grads=self.none_grads, grads=self.grads, losses=self.losses)
        if self.scaler:
            state['scaler'] = self.scaler.state_dict()
        if self.ema is not None:
            state['ema'] = {k: v.clone() for k, v in self.ema.module.state_dict().items()}
        return state


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _batches_of(rank: int, style: str, steps: int, accumulate: int) -> List[List]:
    """Each step's micro-batches for ``rank``."""
    if style == 'sampler':
        dataset = _Batches(2 * steps * accumulate)
        sampler = DistributedSampler(dataset, shuffle=True, seed=3)
        batches = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            batches += [(images[0], [t[0] for t in targets]) for images, targets in
                        DataLoader(dataset, batch_size=1, sampler=sampler)]
        batches = batches[:steps * accumulate]
    else:
        batches = [batch(rank, iteration) for iteration in range(steps * accumulate)]
    return [batches[step * accumulate:(step + 1) * accumulate] for step in range(steps)]


def train_side_by_side(rank: int, world_size: int, style: str = 'plain', accumulate: int = 1,
                       steps: int = 6, guarded_kwargs: Dict = None,
                       reference: Callable = graph_search, output: str = 'loss',
                       reference_output: str = None) -> Dict:
    """GuardedDDP(model, **guarded_kwargs) and ``reference(model)`` trained in ``style`` on
    the same batches, step by step, the guarded model returning ``output`` and the
    reference's ``reference_output`` (the same by default); both runs' states and the
    guard's decision."""
    runs = dict(guarded=Run(guarded, style, output, **(guarded_kwargs or {})),
                reference=Run(reference, style, reference_output or output))
    steps_here = 2 if style == 'join' and rank == 0 else steps
    for name, run in runs.items():
        with (run.model.join() if style == 'join' else _Nothing()):
            for batches in _batches_of(rank, style, steps_here, accumulate):
                run.step(rank, batches, accumulate)
    result = {name: run.state() for name, run in runs.items()}
    result['decision'] = str(runs['guarded'].model.decision.mode)
    result['unused_iterations'] = \
        runs['guarded'].model.usage_record.statistics.iterations_with_unused
    return result


def plain_ddp_steps(rank: int, world_size: int, steps: int = 6, output: str = 'loss',
                    **ddp_kwargs) -> int:
    """Torch's DDP(model, **ddp_kwargs) on the loop, the model returning ``output``; returns
    the steps it finished (where it is expected to raise before)."""
    run = Run(lambda model: DistributedDataParallel(model, **ddp_kwargs), output=output)
    for batches in _batches_of(rank, 'plain', steps, 1):
        run.step(rank, batches)
    return steps


def static_graph_beside_the_graph_search(rank: int, world_size: int, style: str,
                                         accumulate: int, beside: bool, steps: int = 6) -> Dict:
    """Torch's DDP(model, static_graph=True) in ``style``, and with ``beside`` the graph
    search side by side: how far the static graph got (the first line of the error it
    raised), and where it finished, which parameters ended different from the graph
    search's. (Not beside where it raises: the graph search's reducer would keep the group
    alive, and the rank that did not raise would wait for the other for ever.)"""
    runs = [Run(lambda model: DistributedDataParallel(model, static_graph=True), style)]
    if beside:
        runs.append(Run(graph_search, style))
    finished = 0
    for batches in _batches_of(rank, 'plain', steps, accumulate):
        try:
            runs[0].step(rank, batches, accumulate)
        except RuntimeError as error:
            return dict(steps=finished, error=str(error).strip().split('\n')[0])
        if beside:
            runs[1].step(rank, batches, accumulate)
        finished += 1
    static, searched = (run.state() for run in runs)
    return dict(steps=finished, error=None,
                differ=[name for name, value in searched['params'].items()
                        if not torch.equal(static['params'][name], value)],
                none_grads=static['none_grads'], params=static['params'])


def side_by_side_runs(rank: int, world_size: int, cases: Sequence[Dict]) -> List[Dict]:
    """:func:`train_side_by_side` for each of ``cases`` (its keyword arguments), one after
    the other in one process group: one launch for many loops."""
    return [train_side_by_side(rank, world_size, **case) for case in cases]
