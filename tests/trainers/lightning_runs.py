"""The scale detector (tests.pytorch.scale_detector) trained by Lightning's Trainer on each
rank, under a strategy given by name, so that the guarded strategy and Lightning's own
``DDPStrategy(find_unused_parameters=True)`` can be compared bit for bit in one process group.

A run's ``shape`` is what ``training_step`` does: ``loss`` returns the loss, ``dict``
returns ``{'loss': loss, 'preds': predictions}`` (Lightning's way to hand predictions to
callbacks: a returned tensor the loss leaves out when its scale has no target), ``manual``
calls ``self.manual_backward`` and steps its optimizer itself. What each optimizer step saw
(which gradients were None, the gradients, the losses) is recorded by a callback, before the
step.
"""
import logging
import os
from typing import Dict, List, Optional

import torch
from torch.utils.data import DataLoader, Dataset

from tests.pytorch.scale_detector import ScaleDetector, batch, scale_loss, unpacked

SHAPES = ('loss', 'dict', 'manual')


def lightning(package: str):
    """``lightning.pytorch`` or ``pytorch_lightning``, imported."""
    import importlib
    return importlib.import_module(package)


class _RankBatches(Dataset):
    """This rank's batches, in order (``batch_size=None``: each item is a whole batch)."""

    def __init__(self, rank: int, count: int):
        self.rank, self.count = rank, count

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        return batch(self.rank, index)


def _module_class(pl):
    class ScaleDetectorModule(pl.LightningModule):
        def __init__(self, shape: str):
            super().__init__()
            torch.manual_seed(0)
            self.detector = ScaleDetector(output='list')
            self.shape = shape
            self.automatic_optimization = shape != 'manual'
            self.losses: List[float] = []

        def training_step(self, batch_, batch_index):
            images, targets = batch_
            predictions = unpacked(self.detector(images), 'list')
            loss = scale_loss(predictions, targets)
            self.losses.append(loss.item())
            if self.shape == 'manual':
                optimizer = self.optimizers()
                optimizer.zero_grad(set_to_none=True)
                self.manual_backward(loss)
                optimizer.step()
                return None
            if self.shape == 'dict':
                return {'loss': loss, 'preds': predictions}
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=0.01, weight_decay=0.05)

    return ScaleDetectorModule


def _recorder_class(pl):
    class StepRecorder(pl.Callback):
        """Before each optimizer step: the names whose grad is None, and the gradients."""

        def __init__(self):
            self.none_grads, self.grads, self.wrappers = [], [], set()

        def on_before_optimizer_step(self, trainer, module, optimizer):
            self.wrappers.add(type(trainer.strategy.model).__name__)
            named = list(module.detector.named_parameters())
            self.none_grads.append(sorted(name for name, p in named if p.grad is None))
            self.grads.append({name: p.grad.clone() for name, p in named
                               if p.grad is not None})

    return StepRecorder


def _strategy(pl, name: str, kwargs: Dict):
    if name == 'guarded':
        from mmdet3d_ddp_guard.lightning import GuardedDDPStrategy
        return GuardedDDPStrategy(**kwargs)
    return pl.strategies.DDPStrategy(find_unused_parameters=True, **kwargs)


def _trainer(pl, strategy, world_size: int, steps: int, accumulate: int, recorder, root: str):
    # Lightning's environment deletes WORLD_SIZE at its teardown: the count comes from here.
    return pl.Trainer(accelerator='cpu', devices=world_size, num_nodes=1,
                      strategy=strategy, max_steps=steps, accumulate_grad_batches=accumulate,
                      callbacks=[recorder], logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      use_distributed_sampler=False, num_sanity_val_steps=0,
                      default_root_dir=root)


def train(rank: int, world_size: int, strategy_name: str, shape: str = 'loss', accumulate: int = 1,
          steps: int = 6, resume_at: Optional[int] = None, package: str = 'pytorch_lightning',
          root: str = '.', **strategy_kwargs) -> Dict:
    """One Lightning run on this rank; with ``resume_at``, it stops after that many optimizer
    steps, saves Lightning's checkpoint and a new Trainer resumes ``fit`` from it."""
    pl = lightning(package)
    guard_lines = _GuardLines()
    logging.getLogger(pl.__name__).addHandler(guard_lines)
    module = _module_class(pl)(shape)
    recorder = _recorder_class(pl)()
    loader = DataLoader(_RankBatches(rank, steps * accumulate), batch_size=None)
    first = resume_at if resume_at is not None else steps
    trainer = _trainer(pl, _strategy(pl, strategy_name, strategy_kwargs), world_size, first,
                       accumulate,
                       recorder, root)
    trainer.fit(module, loader)
    if resume_at is not None:
        path = os.path.join(root, f'{strategy_name}.ckpt')
        trainer.save_checkpoint(path)
        module = _module_class(pl)(shape)
        trainer = _trainer(pl, _strategy(pl, strategy_name, strategy_kwargs), world_size,
                           steps, accumulate, recorder, root)
        trainer.fit(module, loader, ckpt_path=path)
    optimizer = trainer.optimizers[0]
    return dict(params={k: v.detach().clone() for k, v in module.detector.named_parameters()},
                buffers={k: v.clone() for k, v in module.detector.named_buffers()},
                optimizer_state={k: {n: (t.clone() if torch.is_tensor(t) else t)
                                     for n, t in v.items()}
                                 for k, v in optimizer.state_dict()['state'].items()},
                none_grads=recorder.none_grads, grads=recorder.grads, losses=module.losses,
                global_step=trainer.global_step, wrapper=' '.join(sorted(recorder.wrappers)),
                guard_lines=guard_lines.messages)


class _GuardLines(logging.Handler):
    """The guard's messages, as they reach Lightning's own logger."""

    def __init__(self):
        super().__init__()
        self.messages: List[str] = []

    def emit(self, record):
        if record.name.endswith('.mmdet3d_ddp_guard'):
            self.messages.append(record.getMessage())


def side_by_side(rank: int, world_size: int, cases: List[Dict], root: str) -> List[Dict]:
    """For each case (``train``'s keyword arguments), the guarded strategy's run and the
    reference's, one after the other in one process group."""
    results = []
    for number, case in enumerate(cases):
        runs = {}
        for name in ('guarded', 'reference'):
            where = os.path.join(root, f'case{number}-{name}')
            os.makedirs(where, exist_ok=True)
            runs[name] = train(rank, world_size, name, root=where, **case)
        results.append(runs)
    return results
