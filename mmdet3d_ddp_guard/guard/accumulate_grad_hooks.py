"""A hook that runs when autograd has accumulated a parameter's gradient, on every torch.

:class:`~.usage_record.ParamUsageRecord` learns which parameters a backward reached from
this hook. It must run *before* DDP's own hook on the same parameter: DDP launches the last
gradient bucket from its hook of the last parameter to become ready, and GuardedDDP's comm
hook reads the record right then.

- ``Tensor.register_post_accumulate_grad_hook`` (torch >= 2.1), where it also fires for an
  undefined gradient (not on torch 2.1.2: :func:`tensor_hook_sees_undefined_grads` probes the
  torch at hand once). It runs inside the parameter's ``AccumulateGrad`` node, before that
  node's post-hooks, where DDP's reducer sits; so it always runs first.
- Elsewhere (torch 1.9 to 2.0, and a torch whose tensor hook misses undefined gradients,
  which would make GuardedDDP complete a parameter DDP already marked ready: "Expected to
  mark a variable ready only once"): a post-hook on the same ``AccumulateGrad`` node
  (``param.view_as(param).grad_fn.next_functions[0][0]``, the node DDP's reducer hooks
  itself). Post-hooks run in the order they were added, so the record must be created
  before DDP is (GuardedDDP does). The parameter holds its node only weakly; the handle keeps
  it alive, so DDP's reducer finds and hooks the same node.

Both fire also when the incoming gradient is undefined (a custom autograd Function returned
None for it): ``param.grad`` then stays None, which is how the record tells an undefined
gradient from a reached one.
"""
import functools
from typing import Callable, Optional

import torch

POST_ACCUMULATE_GRAD_HOOK = hasattr(torch.Tensor, 'register_post_accumulate_grad_hook')


class _UndefinedGrad(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, weight):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad, None


@functools.lru_cache(maxsize=None)
def tensor_hook_sees_undefined_grads() -> bool:
    """Whether this torch's tensor hook fires when autograd reaches a parameter with an
    undefined gradient, as the record needs (measured once, on two tiny tensors)."""
    if not POST_ACCUMULATE_GRAD_HOOK:
        return False
    weight = torch.nn.Parameter(torch.ones(1))
    fired = []
    handle = weight.register_post_accumulate_grad_hook(fired.append)
    x = torch.ones(1, requires_grad=True)
    with torch.enable_grad():
        _UndefinedGrad.apply(x, weight).sum().backward()
    handle.remove()
    return bool(fired)


def hooks_nodes() -> bool:
    """Whether the record hooks ``AccumulateGrad`` nodes (rather than tensors) by default."""
    return not (POST_ACCUMULATE_GRAD_HOOK and tensor_hook_sees_undefined_grads())


def register_grad_accumulated_hook(param: torch.Tensor, hook: Callable[[torch.Tensor], None],
                                   use_node: Optional[bool] = None):
    """Calls ``hook(param)`` each time a backward accumulates into ``param`` (or reaches it
    with an undefined gradient). Returns a handle with ``remove()``.

    Args:
        param (Tensor): A leaf tensor that requires grad.
        hook (callable): Called with ``param``.
        use_node (bool, optional): Hook the ``AccumulateGrad`` node (True) or use the tensor
            hook (False). Defaults to the node where torch has no tensor hook, or one that
            misses undefined gradients; the tests of the node path set
            :data:`POST_ACCUMULATE_GRAD_HOOK` to False.
    """
    if use_node is None:
        use_node = hooks_nodes()
    if not use_node:
        return param.register_post_accumulate_grad_hook(hook)
    return _AccumulateGradNodeHook(param, hook)


class _AccumulateGradNodeHook:
    """A post-hook on ``param``'s ``AccumulateGrad`` node, and the reference that keeps the
    node alive while hooked."""

    def __init__(self, param: torch.Tensor, hook: Callable[[torch.Tensor], None]):
        self.param = param
        with torch.enable_grad():
            self.node = param.view_as(param).grad_fn.next_functions[0][0]

        def after_accumulation(grad_inputs, grad_outputs):
            hook(param)

        self._handle = self.node.register_hook(after_accumulation)

    def remove(self) -> None:
        self._handle.remove()
        self.node = self.param = None
