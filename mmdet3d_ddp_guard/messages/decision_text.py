"""The words of the guard's decision: what each mode does, why the guard chose it, and the
block it logs at build and at every revision.

Functions of data only: the decision policy (:mod:`mmdet3d_ddp_guard.guard.decision_policy`)
chooses and revises; this module says it.
"""
import textwrap
from typing import Optional

from .config_lines import ConfigLines
from .ddp_outcome import FAILS, UNDEFINED_GRADIENTS_ONLY, outcome_line
from .mode_request import CONFIG_TOP_LEVEL

#: What each mode does and costs, logged once, at build (keys: the modes' texts).
MODE_EXPLANATIONS = {
    'complete': (
        "DDP's fast path (find_unused_parameters=False). DDP's last bucket "
        'all-reduce carries, per parameter, the number of ranks that did not use it: '
        'a rank that used everything adds a zero tensor kept on the device, with no '
        'host sync and no collective of ours. A rank that did not reach some '
        "parameters gives them a zero gradient through one extra small backward, "
        "which fires DDP's own hooks so their buckets are reduced, and gives the ones "
        'no rank used grad None, as under find_unused_parameters=True. The per-rank '
        'detail is read after the optimizer step; one all_gather of a byte per '
        'parameter follows only in iterations where ranks disagree.'),
    'find_unused': (
        'DDP walks the autograd graph from the forward outputs every iteration '
        'and all-reduces a per-parameter used map.'),
    'static_graph': (
        'DDP records the used parameters in the first iteration and expects '
        'exactly that set in every later iteration; the guard stops the run '
        'with a clear error the iteration the set changes.'),
    'strict': (
        "DDP's fast path with no safety net, at the cost of 'auto' when nothing is "
        'unused. If a rank leaves parameters unreached, its buckets are completed so '
        'that no rank hangs, and every rank stops before the next forward with the same '
        'clear error (which ranks, names, shapes, modules, the line that fixes it).'),
}

#: What a run that accumulates gradients gets instead of DDP's graph search before torch 2.4.
ACCUMULATION_BUG = (
    'find_unused_parameters=True was written, but this run accumulates gradients '
    '({option}={counts}) on torch {torch_version}, where DDP\'s graph search does '
    'not synchronise a parameter used in an earlier micro-step of the window but not in the '
    'last one (pytorch/pytorch#69031, fixed in torch 2.4 by pytorch/pytorch#124193): the '
    'ranks would silently train different weights. {wrapper} trains this run with mode '
    "'complete' instead, which gives what the corrected graph search gives. To keep this "
    "choice without this warning, write find_unused_parameters='auto' {where}; to "
    'use DDP\'s graph search, upgrade torch to 2.4 or newer.')

STATIC_GRAPH_HONOURED = 'static_graph=True was written; it is honoured.'
STRICT_HONOURED = 'find_unused_parameters=False was written; it is honoured.'
NOTHING_OBSERVED = (
    'nothing observed yet. Completion costs next to nothing while every parameter is used '
    'and keeps the run alive if some go unused later (a rare empty batch); the graph search '
    'would be paid every iteration, and a static graph fails the first time the used set '
    'changes.')


def accumulation_bug_reason(counts: int, torch_version: str, lines: ConfigLines) -> str:
    return ACCUMULATION_BUG.format(counts=counts, torch_version=torch_version,
                                   option=lines.accumulation_option, wrapper=lines.wrapper,
                                   where=lines.where)


def graph_search_honoured_reason(source: str, lines: ConfigLines) -> str:
    """Why mode 'find_unused' (True was written), and how to let the guard choose."""
    if source == CONFIG_TOP_LEVEL:
        # Often inherited from mmdet3d (SMOKE's config among others); a config cannot
        # delete an inherited key, only override it. No spaces in the line: the message is
        # wrapped at spaces and the line must stay whole.
        how = ("To let the guard choose, add this line to your config: "
               "find_unused_parameters='auto' (it also overrides a True inherited from an "
               'mmdet3d config).')
    else:
        how = lines.let_the_guard_choose
    return f'find_unused_parameters=True was written; it is honoured. {how}'


def revised_reason(pattern: str, first_unused: Optional[int], first_unreached: Optional[int],
                   mode: str, completes: bool) -> str:
    """Why the decision was re-issued: the usage ``pattern`` (``'undefined_only'``,
    ``'constant'``, ``'changing'`` or ``'rank_dependent'``) and what it means for ``mode``
    (``completes``: the mode is the guard's completion)."""
    if pattern == 'undefined_only':
        consequence = (f'parameters went unused from iteration {first_unused} on, with '
                       f'undefined gradients only: {UNDEFINED_GRADIENTS_ONLY}')
    else:
        fails = outcome_line(FAILS, first_unreached)
        consequence = {
            'constant': f'parameters went unused from iteration {first_unused} on: {fails}',
            'changing': 'the set of unused parameters changes between iterations, so '
                        f'static_graph=True would fail too; {fails}',
            'rank_dependent': 'ranks disagree on which parameters are unused in the same '
                              f'iteration: {fails}',
        }[pattern]
    if completes:
        return consequence + ' Completion keeps training correct; mode unchanged.'
    return consequence + f' The requested mode {mode!r} is kept.'


def decision_message(decision) -> str:
    """The block a :class:`~mmdet3d_ddp_guard.guard.decision_policy.Decision` is logged as:
    at build with how its mode works, at a revision with its evidence."""
    when = 'at build' if decision.iteration is None else f'after iteration {decision.iteration}'
    lines = [
        f'{decision.lines.wrapper} decision ({when}): mode={decision.mode!r} '
        f'(requested find_unused_parameters={decision.requested!r}, from {decision.source})',
        *textwrap.wrap(f'why: {decision.reason}', 92, initial_indent='  ',
                       subsequent_indent='       '),
    ]
    if decision.iteration is None:
        # Once, at build; a revision keeps the mode and only adds evidence.
        lines += textwrap.wrap(f'how: {MODE_EXPLANATIONS[decision.mode]}', 92,
                               initial_indent='  ', subsequent_indent='       ')
    lines += [f'  {line}' for line in decision.evidence]
    return '\n'.join(lines)
