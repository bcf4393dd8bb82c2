"""GuardedDDP for a plain PyTorch loop: torch's ``DistributedDataParallel``, guarded."""
from torch.nn.parallel import DistributedDataParallel

from ..environment.framework_table import PYTORCH_LINES
from ..guard.step_per_forward import StepPerForwardWrapper
from .loop_log import log_from_rank
from .step_errors import PYTORCH_STEP_ERRORS, WHERE_BACKWARDS_RUN


class GuardedDDP(StepPerForwardWrapper, DistributedDataParallel):
    """torch's ``DistributedDataParallel`` for your own training loop, which unused
    parameters cannot crash or hang.

    **What an unused parameter is.** DDP averages gradients across ranks bucket by bucket,
    and starts a bucket's all-reduce when autograd has produced the gradient of every
    parameter in it. A parameter that autograd never reaches in a backward (a layer not
    called, a branch skipped for this batch, a detection scale without a target left out of
    the loss) never becomes ready, so its bucket is never reduced. With
    ``find_unused_parameters=False`` (DDP's default) the next forward raises ``Expected to
    have finished reduction in the prior iteration ...``; when only some ranks skip it, the
    others wait in the all-reduce and the run hangs until the collective times out (often
    after hours: the batch that leaves a scale without a target is rare). DDP's own ways out
    each cost something: ``find_unused_parameters=True`` walks the autograd graph every
    iteration and never says what it found; ``static_graph=True`` needs the same used set in
    every iteration, so it fails on exactly the data-dependent case.

    **What this class does.** The same signature as the installed torch's
    ``DistributedDataParallel``, the same argument names, order and defaults, with one
    exception: ``find_unused_parameters`` defaults to ``'auto'``. Everything you pass goes
    to DDP as written; the wrapper is a DDP (``isinstance``, ``.module``, ``no_sync``,
    ``join``, ``state_dict``, ``copy.deepcopy``, ``torch.save`` behave as on it).

    - ``find_unused_parameters='auto'`` (the default): DDP's fast path. When a rank's
      backward leaves parameters unreached, that rank runs one extra backward of zero
      gradients into them at the end of its backward, so its buckets reduce; parameters that
      no rank used get ``grad=None``, so the optimizer skips them, as under DDP's graph
      search. It trains bit for bit as ``DistributedDataParallel(model,
      find_unused_parameters=True)`` (2 ranks; every rank's weights and optimizer state
      compared in ``tests/pytorch``). With nothing unused it costs one hook call per
      parameter per backward and ``P`` extra elements on the last gradient bucket: no
      collective, no graph walk, no host sync before the optimizer step. Which parameters
      each rank left unused, and when, is logged when it changes (and written to files by
      :class:`~.unused_params_report.UnusedParamsReport`).
    - ``True``: DDP's graph search every iteration, as written.
    - ``False``: strict. DDP's fast path; if a rank leaves a parameter unreached, every rank
      raises the same :class:`~mmdet3d_ddp_guard.UnusedParametersError` at the next forward,
      naming the parameters, the ranks, the iteration and the fix (no hang, no "Expected to
      have finished reduction").

    **Where the guard acts.** A step is a forward with gradients enabled (DDP prepares its
    reducer there too); a forward under ``torch.no_grad()`` (validation) is not one. The
    unused parameters are settled at the end of the step's first backward (autograd's final
    callback, after DDP's own), before anything reads a gradient (``clip_grad_norm_``,
    ``GradScaler.unscale_``, your optimizer step), however you call it:
    ``loss.backward()``, ``scaler.scale(loss).backward()``, reentrant activation
    checkpointing. Inside ``no_sync()`` (gradient accumulation) each micro-step is recorded
    and the window's last bucket carries their counts.

    **The loss computed in your loop.** ``preds = model(x); loss = criterion(preds, y)``:
    a tensor the forward returned (a detection scale without a target in this batch, an
    auxiliary output, a field of a dict, dataclass or ``ModelOutput``) that the loss leaves
    out is not back-propagated, and the parameters only it reaches are unused in that step,
    as torch's DDP with ``find_unused_parameters=True`` counts them (its ``_DDPSink`` gives
    such a tensor an undefined gradient). A second backward in the same step that reaches
    one of those parameters (``loss_a.backward(retain_graph=True); loss_b.backward()``)
    stops the run with an error naming it and the fix, ``(loss_a + loss_b).backward()``:
    its gradient could no longer be reduced (docs/pytorch.md says what each DDP does there).

    **The stall guard** is on by default (``stall_timeout=180``): when ranks are proven stuck
    in different collectives, or a rank raised while the others wait for it, it logs the
    same diagnosis on every rank and ends the process on every rank with exit code 1.
    ``stall_timeout=None`` turns it off.

    **The log.** Messages go to the handlers of the ``logging`` logger
    ``'mmdet3d_ddp_guard'`` where your program gave it some; otherwise to stderr, from rank 0
    (errors from every rank).

    Args:
        module (nn.Module): The model to wrap.
        find_unused_parameters (str | bool): ``'auto'``, True or False, as above. Defaults to
            ``'auto'``.
        static_graph (bool): DDP's static graph, as on DDP; a change of the used set stops the
            run with :class:`~mmdet3d_ddp_guard.StaticGraphChangedError` naming it.
        stall_timeout (float | None): Keyword only. Seconds a rank may stay in one place
            before its watchdog compares positions with the other ranks: how soon a hang is
            named; a slower phase (an evaluation on rank 0) costs one log line. None turns
            the stall guard off. Defaults to 180.
        *others: torch's ``DistributedDataParallel`` arguments, as DDP takes them.

    Example::

        from mmdet3d_ddp_guard.pytorch import GuardedDDP
        model = GuardedDDP(model, device_ids=[local_rank])  # in place of DDP(...)
    """

    lines = PYTORCH_LINES
    log = staticmethod(log_from_rank)
    step_errors = PYTORCH_STEP_ERRORS
    where_backwards_run = WHERE_BACKWARDS_RUN

    def forward(self, *inputs, **kwargs):
        output, revisions = self.guarded_forward(*inputs, **kwargs)
        for revision in revisions:
            self.log(revision)
        return output
