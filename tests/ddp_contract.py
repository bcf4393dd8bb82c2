"""The DDP contract: what users do to a DDP object, done to the guarded wrapper and to its
framework's own wrapper, one case after the other on the same ranks.

The cases port those of torch's own DDP tests (``torch/testing/_internal/distributed/
distributed_test.py``) that run on gloo and handle the wrapper as an object: pickling and
copying it (``_test_DistributedDataParallel`` saves and loads the wrapper, then trains the
loaded one), ``state_dict`` / ``load_state_dict``, ``no_sync``, buffers and
``broadcast_buffers``, parameters whose ``requires_grad`` changes, sparse gradients,
``gradient_as_bucket_view``, a module in ``eval()`` mode, a forward with no backward,
shared parameters and ``named_parameters`` (every case returns the names and the
``state_dict`` keys). docs/compatibility.md lists them with the torch tests they port and
the ones that do not apply.

An adapter (:mod:`tests.ddp_contract_mmengine`, :mod:`tests.openmmlab1.ddp_contract_mmcv`,
:mod:`tests.pytorch.ddp_contract_pytorch`) builds its framework's wrapper, guarded or not, and runs one training step as the framework
does; the cases know nothing of either. Each case returns every rank's weights, buffers
and optimizer state, and what it adds (an EMA copy, a loaded copy's output, val outputs),
which tests/test_ddp_contract.py compares bit for bit with the framework's own wrapper's.
"""
import copy
import io
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from tests.dist_utils import TRUSTED_LOAD, collect_earlier_runs

ITERATIONS = 6


class ContractModel(nn.Module):
    """The contract's net as a user's model holds it (the cases reach it as ``.net``); the
    mmcv 1.x adapter adds the train and val steps its runner calls."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, tokens, use_branch=True, use_embedding=True):
        return self.net(tokens, use_branch, use_embedding)


class ContractNet(nn.Module):
    """A detector-sized toy: an input embedding registered first (DDP's last bucket once
    its buckets are rebuilt, as a real input embedding's), a trunk, batch norm (buffers
    that differ per rank), a layer applied twice (shared parameters), a head and a branch
    that some ranks skip."""

    def __init__(self, sparse: bool = False):
        super().__init__()
        self.embedding = nn.Embedding(8, 6, sparse=sparse)
        self.trunk = nn.Linear(6, 6)
        self.norm = nn.BatchNorm1d(6)
        self.shared = nn.Linear(6, 6, bias=False)
        self.head = nn.Linear(6, 1)
        self.branch = nn.Linear(6, 1)

    def forward(self, tokens, use_branch=True, use_embedding=True):
        features = self.embedding(tokens) if use_embedding else tokens.float()[:, None] * \
            torch.ones(1, 6)
        features = self.norm(self.trunk(features).relu())
        features = self.shared(self.shared(features).relu())
        output = self.head(features).pow(2).mean()
        if use_branch:
            output = output + self.branch(features).abs().mean()
        return output


def _skips_on_odd_rank_odd_iteration(rank: int, iteration: int) -> bool:
    return rank == 1 and iteration % 2 == 1


def _never(rank: int, iteration: int) -> bool:
    return False


@dataclass
class Case:
    """One contract case.

    Attributes:
        unused: something goes unused on some rank, so the framework's own wrapper runs
            DDP's graph search (its fast path cannot train it).
        wrapper_kwargs: given to both wrappers, as a user writes them.
        guarded_mode: the guard's ``find_unused_parameters`` ('auto': not written).
        skip_branch, skip_embedding: ``(rank, iteration) -> bool``.
        accumulate: micro-steps per optimizer step (``no_sync`` on all but the last).
        own_wrapper_dense: the framework's own wrapper trains the model with a dense
            embedding: DDP's graph search cannot train a sparse one that some rank leaves
            unused ("Expected sparse gradient to be defined"), and the same training with
            dense gradients is the independent computation the guard is held to.
        momentum: SGD's, for every parameter but the embeddings' (:func:`sgd_param_groups`).
        around: ``around(ddp, iteration, extras, adapter)`` before each iteration; returns
            the wrapper to train from then on (a case may replace it with a copy).
        after: ``after(ddp, iteration, extras, adapter)`` after each step.
    """
    unused: bool = False
    wrapper_kwargs: Dict = field(default_factory=dict)
    guarded_mode: str = 'auto'
    sparse: bool = False
    skip_branch: Callable[[int, int], bool] = _never
    skip_embedding: Callable[[int, int], bool] = _never
    accumulate: int = 1
    momentum: float = 0.9
    own_wrapper_dense: bool = False
    around: Optional[Callable] = None
    after: Optional[Callable] = None


def sgd_param_groups(wrapper, momentum: float):
    """SGD's parameter groups: ``momentum`` for every parameter but the embeddings', which
    train without (torch 1.12's SGD cannot keep a sparse momentum: "set_indices_and_values_
    unsafe is not allowed on a Tensor created from .data"; a sparse momentum would sum in
    another order than its dense twin, the independent computation of the sparse cases)."""
    embeddings = {id(p) for m in wrapper.modules() if isinstance(m, nn.Embedding)
                  for p in m.parameters()}
    groups = [dict(params=[p for p in wrapper.parameters() if id(p) not in embeddings],
                   momentum=momentum),
              dict(params=[p for p in wrapper.parameters() if id(p) in embeddings],
                   momentum=0.0)]
    return [group for group in groups if group['params']]


def copy_for_ema(wrapper):
    """BEVDet's MEGVIIEMAHook's copy: every SyncBatchNorm's process group set to None around
    ``deepcopy(runner.model)`` (the wrapper itself), the copy in eval mode and frozen."""
    sync_bns = [m for m in wrapper.modules() if isinstance(m, nn.SyncBatchNorm)]
    groups = [m.process_group for m in sync_bns]
    for module in sync_bns:
        module.process_group = None
    ema = copy.deepcopy(wrapper).eval()
    for module, group in zip(sync_bns, groups):
        module.process_group = group
    for param in ema.parameters():
        param.requires_grad_(False)
    return ema


def update_ema(ema, wrapper, decay: float = 0.9) -> None:
    """The hook's update after every iteration, from ``runner.model.module.state_dict()``."""
    trained = wrapper.module.state_dict()
    with torch.no_grad():
        for key, value in ema.module.state_dict().items():
            if value.dtype.is_floating_point:
                value.mul_(decay).add_(trained[key], alpha=1 - decay)


def _copy_for_ema(ddp, iteration, extras, adapter):
    if iteration == 0:
        extras['ema'] = copy_for_ema(ddp)
    return ddp


def _update_ema(ddp, iteration, extras, adapter):
    update_ema(extras['ema'], ddp)


def _pickle_and_train_the_copy(ddp, iteration, extras, adapter):
    """torch's own test: ``torch.save`` of the whole wrapper, ``torch.load``, and the
    loaded wrapper trains."""
    if iteration > 0:
        return ddp
    buffer = io.BytesIO()
    torch.save(ddp, buffer)
    buffer.seek(0)
    extras['original'] = ddp  # kept alive, as a user's script keeps it
    return torch.load(buffer, **TRUSTED_LOAD)


def _reload_state_dict(ddp, iteration, extras, adapter):
    if iteration == 2:
        extras['saved'] = copy.deepcopy(ddp.state_dict())
    if iteration == 4:
        ddp.load_state_dict(extras['saved'])
    return ddp


def _freeze_then_unfreeze(ddp, iteration, extras, adapter):
    """A hook that freezes the trunk after warm-up, and unfreezes it later."""
    if iteration in (2, 4):
        for param in ddp.module.net.trunk.parameters():
            param.requires_grad_(iteration == 4)
    return ddp


def _eval_forward_and_forward_without_backward(ddp, iteration, extras, adapter):
    """A val loop in ``eval()`` between steps (torch's test_ddp_inference), then a
    train-mode forward whose output nobody back-propagates."""
    if iteration % 2 == 1:
        ddp.eval()
        extras.setdefault('val', []).append(
            adapter.val(ddp, contract_batch(iteration + 100)))
        ddp.train()
        adapter.forward(ddp, contract_batch(iteration + 200))
    return ddp


CASES = {
    'rank_dependent_branch': Case(unused=True, skip_branch=_skips_on_odd_rank_odd_iteration),
    'deepcopy_for_ema': Case(unused=True, skip_branch=_skips_on_odd_rank_odd_iteration,
                             around=_copy_for_ema, after=_update_ema),
    'pickle_then_train_the_copy': Case(unused=True,
                                       skip_branch=_skips_on_odd_rank_odd_iteration,
                                       around=_pickle_and_train_the_copy),
    'state_dict_round_trip': Case(unused=True, skip_branch=_skips_on_odd_rank_odd_iteration,
                                  around=_reload_state_dict),
    'no_sync_accumulation': Case(unused=True, skip_branch=_skips_on_odd_rank_odd_iteration,
                                 accumulate=2),
    'broadcast_buffers_true': Case(wrapper_kwargs=dict(broadcast_buffers=True)),
    'frozen_after_build': Case(unused=True, around=_freeze_then_unfreeze),
    'frozen_after_build_strict': Case(unused=True, guarded_mode=False,
                                      around=_freeze_then_unfreeze),
    'sparse_embedding': Case(sparse=True),
    'sparse_embedding_skipped': Case(unused=True, sparse=True, own_wrapper_dense=True,
                                     skip_embedding=_skips_on_odd_rank_odd_iteration),
    'gradient_as_bucket_view': Case(unused=True, skip_branch=_skips_on_odd_rank_odd_iteration,
                                    wrapper_kwargs=dict(gradient_as_bucket_view=True)),
    'eval_and_forward_without_backward': Case(
        around=_eval_forward_and_forward_without_backward),
}


def contract_batch(iteration: int, rank: int = 0, case: Optional[Case] = None) -> Dict:
    generator = torch.Generator().manual_seed(1000 * rank + iteration)
    batch = dict(tokens=torch.randint(0, 8, (4, ), generator=generator))
    if case is not None:
        batch.update(use_branch=not case.skip_branch(rank, iteration),
                     use_embedding=not case.skip_embedding(rank, iteration))
    return batch


def dense_copy(value):
    """Sparse gradients leave sparse momenta: compared as dense tensors."""
    if isinstance(value, torch.Tensor):
        return value.to_dense().clone() if value.is_sparse else value.detach().clone()
    if isinstance(value, dict):
        return {key: dense_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(dense_copy(item) for item in value)
    return value


def train_case(adapter, name: str, guarded: bool) -> Dict:
    """Trains ``CASES[name]`` under ``adapter``'s guarded wrapper or its framework's own,
    and returns what the test compares (or the error's text)."""
    case = CASES[name]
    collect_earlier_runs()
    torch.manual_seed(0)
    model = adapter.model(ContractNet(sparse=case.sparse and (guarded
                                                              or not case.own_wrapper_dense)))
    mode = case.guarded_mode if guarded else case.unused
    ddp = adapter.wrap(model, guarded, mode, **case.wrapper_kwargs)
    extras: Dict = {}
    rank = dist.get_rank()
    optimizer = None
    try:
        for iteration in range(ITERATIONS):
            if case.around is not None:
                replaced = case.around(ddp, iteration, extras, adapter)
                if replaced is not ddp:
                    ddp, optimizer = replaced, None
            if optimizer is None:
                optimizer = adapter.optimizer(ddp, case.accumulate, case.momentum)
            adapter.step(ddp, optimizer, contract_batch(iteration, rank, case), iteration,
                         case.accumulate)
            if case.after is not None:
                case.after(ddp, iteration, extras, adapter)
    except Exception as error:  # noqa: B902 - the test reads it
        return dict(error=f'{type(error).__name__}: {error}')
    result = dict(
        weights=dense_copy(dict(ddp.module.named_parameters())),
        buffers=dense_copy(dict(ddp.module.named_buffers())),
        optimizer=dense_copy(adapter.optimizer_state(optimizer)),
        names=[name for name, _ in ddp.named_parameters()],
        state_dict_keys=list(ddp.state_dict()),
        wrapper_class=type(ddp).__name__,
        val=dense_copy(extras.get('val', [])))
    if 'ema' in extras:
        ema = extras['ema']
        result.update(ema=dense_copy(ema.state_dict()), ema_class=type(ema).__name__,
                      ema_output=dense_copy(adapter.val(ema, contract_batch(7))))
    wrappers = dict(trained=ddp, **{role: extras[role] for role in ('ema', 'original')
                                      if role in extras})
    if guarded:
        result['watchdogs'] = {role: wrapper.stall_watchdog is not None
                               for role, wrapper in wrappers.items()}
    for wrapper in wrappers.values():
        watchdog = getattr(wrapper, 'stall_watchdog', None)
        if watchdog is not None:
            watchdog.stop()
    return result


def train_every_case(rank: int, world_size: int, adapter_name: str):
    """Every case under both wrappers, in one launch (the ranks, imports and group are
    paid once)."""
    adapter = load_adapter(adapter_name)
    return {(name, guarded): train_case(adapter, name, guarded)
            for name in CASES for guarded in (False, True)}


def load_adapter(name: str):
    if name == 'pytorch':
        from tests.pytorch.ddp_contract_pytorch import PlainAdapter
        return PlainAdapter()
    if name == 'mmengine':
        from tests.ddp_contract_mmengine import MMEngineAdapter
        return MMEngineAdapter()
    from tests.openmmlab1.ddp_contract_mmcv import MMCVAdapter
    return MMCVAdapter()
