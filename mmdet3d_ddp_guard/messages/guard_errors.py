"""The texts of the errors the guard raises: instead of DDP's index lists and hangs, each
names the parameters and the fix in the words of the user's framework (:mod:`.config_lines`);
and the texts of the guard's own faults, which name what broke.

Functions of data: the guard (:mod:`mmdet3d_ddp_guard.guard.errors` and the modules that
raise) decides when; these say what.
"""
from typing import Mapping, Sequence

from .config_lines import ConfigLines
from .parameter_text import parameter_rows


def unused_parameters_message(table, offenders: Mapping[int, Sequence[int]], iteration: int,
                              source: str, lines: ConfigLines) -> str:
    """The strict stop: ``offenders`` maps each rank known to have left parameters without a
    gradient to their ids (``table``: the parameter table they index)."""
    parts = [f'{lines.wrapper}: parameters received no gradient in iteration {iteration} on '
             f'rank(s) {", ".join(map(str, offenders))}, but find_unused_parameters=False '
             f'was requested ({source}). Plain DDP would fail at the next forward ("Expected '
             'to have finished reduction in the prior iteration") or hang the other ranks; '
             'every rank stops here instead.']
    for rank, ids in offenders.items():
        parts += [f'rank {rank}: {len(ids)} parameters', parameter_rows(table, ids)]
    parts.append(f'Fix: let the guard handle them, {lines.where}:\n    {lines.mode("auto")}\n'
                 f'{lines.mode_over_false}. Or make the model use these parameters in the '
                 'loss of every iteration.')
    return '\n'.join(parts)


def static_graph_changed_message(table, appeared: Sequence[int], returned: Sequence[int],
                                 iteration: int, rank: int, lines: ConfigLines) -> str:
    """``static_graph=True``, and the used set changed: ``appeared`` are newly unused,
    ``returned`` used again."""
    parts = [f'{lines.wrapper}: static_graph=True, but in iteration {iteration} on rank {rank} '
             'the set of unused parameters differs from the first iteration\'s; DDP\'s '
             'static graph cannot follow that and would fail or hang.']
    if appeared:
        parts += ['Newly unused:', parameter_rows(table, appeared)]
    if returned:
        parts += ['Used again (unused in the first iteration):',
                  parameter_rows(table, returned)]
    parts.append(f'Fix: {lines.static_graph_fix}.')
    return '\n'.join(parts)


def comm_hook_registered_twice(registration: str) -> str:
    """A second comm hook: DDP's own words (its reducer's), naming the call made second."""
    other = {'register_comm_hook': 'register_builtin_comm_hook',
             'register_builtin_comm_hook': 'register_comm_hook'}[registration]
    return f'{registration} or {other} can only be called once.'


def builtin_comm_hook_unknown(comm_hook_type) -> str:
    return (f'_register_builtin_comm_hook: the guard runs the built-in hooks ALLREDUCE and '
            f'FP16_COMPRESS through their Python twins, and does not know {comm_hook_type}; '
            f'register its Python hook with register_comm_hook(state, hook) instead.')


def counts_not_reduced(wrapper: str) -> str:
    return (f"{wrapper}: the last gradient bucket was not reduced in this backward; another "
            "comm hook may have replaced the guard's.")


def join_refused(torch_version: str, lines: ConfigLines) -> str:
    """``join()`` on a torch whose joined rank all-reduces without DDP's comm hook, which
    carries the guard's counts in every mode but the graph search."""
    return (f'{lines.wrapper}: join() (uneven inputs) under the guard needs torch >= 1.10: on '
            f'torch {torch_version} a rank that joined all-reduces its zero gradients without '
            "DDP's comm hook, which carries the guard's unused-parameter counts, so its "
            "all-reduces would not match the other ranks'. Build "
            f"{lines.mode_template.format(value='True')} (DDP graph search, which joins "
            'here), or upgrade torch to >= 1.10.')


def counts_for_other_iterations(arrived: int, open_iterations: int) -> str:
    return (f'ParamUsageRecord: counts for {arrived} iterations arrived but {open_iterations} '
            'are open; every rank must end the same iterations locally before the bucket that '
            'carries them is reduced.')


def resolved_for_other_iterations(resolved: int, open_iterations: int) -> str:
    return f'ParamUsageRecord: {resolved} resolved iterations for {open_iterations} open ones.'


def checkpoint_counts_other_parameters(checkpointed: int, here: int) -> str:
    return (f'UsageStatistics: the checkpoint counts {checkpointed} trainable parameters but '
            f'this model has {here}; resume with the same model, or drop the hook state from '
            'the checkpoint (meta["unused_params"]).')


def backward_callbacks_missing(torch_version: str, missing: Sequence[str]) -> str:
    return (f'mmdet3d_ddp_guard: torch {torch_version} has no {" and no ".join(missing)}, '
            'which the guard needs to find the end of a step\'s backward where the training '
            'loop runs it outside the wrapper (mmcv 1.x\'s optimizer hook, a plain PyTorch '
            'loop). Supported: torch 1.9 to 2.14; please report this torch '
            "version at the project's issue tracker.")


def partial_backward_text_missing() -> str:
    return ('StepBackwards: waits_for_outputs=True needs the text of '
            'StepErrorTexts.partial_backward, the error of a step whose backwards left out a '
            'returned output.')


def graph_search_accumulation_refused(torch_version: str, lines: ConfigLines) -> str:
    """A guarded wrapper asked for DDP's graph search meets gradient accumulation
    (``no_sync``) on a torch that accumulates it wrong."""
    return (f'{lines.wrapper}: find_unused_parameters=True (DDP graph search) with gradient '
            f'accumulation (no_sync) trains wrong on torch {torch_version}: a parameter used '
            'in an earlier micro-step of the window but not in the last one is not '
            'synchronised across ranks (pytorch/pytorch#69031, fixed in torch 2.4). Build '
            f"{lines.wrapper} with find_unused_parameters='auto' (the same training as the "
            'corrected graph search), or upgrade torch to >= 2.4.')


def static_graph_not_a_bool(value, lines: ConfigLines) -> str:
    return f'{lines.wrapper}: static_graph must be True or False, not {value!r}.'
