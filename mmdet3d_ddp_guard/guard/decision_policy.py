"""How the guard treats unused parameters: the modes, the decision, and its revisions.

The policy is kept apart from the wrapper so that it can be read (and tested) on its own: it
turns the user's request (read by :mod:`~mmdet3d_ddp_guard.messages.mode_request`) into a
:class:`Decision`, and re-reads the evidence of every iteration to say, in one block, what it
saw and what that means for this model (the evidence's text:
:mod:`~mmdet3d_ddp_guard.messages.decision_evidence`).
"""
import textwrap
from dataclasses import dataclass, field
from typing import List, Optional, Union

import torch

from ..environment.versions import graph_search_accumulates_right
from ..messages.config_lines import MMCV1_LINES, ConfigLines
from ..messages.ddp_outcome import FAILS, UNDEFINED_GRADIENTS_ONLY, outcome_line
from ..messages.decision_evidence import evidence_lines
from ..messages.mode_request import CONFIG_TOP_LEVEL
from ..messages.text_enum import TextEnum
from .iteration_usage import IterationUsage, UsageStatistics
from .param_table import ParamTable


class Mode(TextEnum):
    """How GuardedDDP treats unused parameters (a :class:`Decision`'s ``mode``); a member
    reads as its text (:class:`TextEnum`)."""
    #: Our own way: DDP's fast path, plus completion of the reduction for parameters that
    #: autograd did not reach (see GuardedDDP's docstring).
    COMPLETE = 'complete'
    #: DDP's graph search, ``find_unused_parameters=True``.
    FIND_UNUSED = 'find_unused'
    #: DDP's ``static_graph=True``.
    STATIC_GRAPH = 'static_graph'
    #: DDP's fast path, ``find_unused_parameters=False``, and a clear error instead of DDP's.
    STRICT = 'strict'


# The modes under their names before :class:`Mode` (tests and user code import them).
COMPLETE = Mode.COMPLETE
FIND_UNUSED = Mode.FIND_UNUSED
STATIC_GRAPH = Mode.STATIC_GRAPH
STRICT = Mode.STRICT

MODE_EXPLANATIONS = {
    Mode.COMPLETE: (
        "DDP's fast path (find_unused_parameters=False). DDP's last bucket "
        'all-reduce carries, per parameter, the number of ranks that did not use it: '
        'a rank that used everything adds a zero tensor kept on the device, with no '
        'host sync and no collective of ours. A rank that did not reach some '
        "parameters gives them a zero gradient through one extra small backward, "
        "which fires DDP's own hooks so their buckets are reduced, and gives the ones "
        'no rank used grad None, as under find_unused_parameters=True. The per-rank '
        'detail is read after the optimizer step; one all_gather of a byte per '
        'parameter follows only in iterations where ranks disagree.'),
    Mode.FIND_UNUSED: (
        'DDP walks the autograd graph from the forward outputs every iteration '
        'and all-reduces a per-parameter used map.'),
    Mode.STATIC_GRAPH: (
        'DDP records the used parameters in the first iteration and expects '
        'exactly that set in every later iteration; the guard stops the run '
        'with a clear error the iteration the set changes.'),
    Mode.STRICT: (
        "DDP's fast path with no safety net, at the cost of 'auto' when nothing is "
        'unused. If a rank leaves parameters unreached, its buckets are completed so '
        'that no rank hangs, and every rank stops before the next forward with the same '
        'clear error (which ranks, names, shapes, modules, the config line that fixes '
        'it).'),
}


@dataclass
class Decision:
    """What the guard does about unused parameters, why, and on what evidence.

    Attributes:
        mode (Mode): ``'complete'``, ``'find_unused'``, ``'static_graph'`` or ``'strict'``
            (see ``MODE_EXPLANATIONS``).
        requested: What the user asked for (``'auto'``, True or False).
        source (str): Where the request came from.
        reason (str): Why this mode, in a sentence.
        lines (ConfigLines): The framework's words: the wrapper the decision is of.
        iteration (int, optional): The iteration whose evidence led here; None at build.
        evidence (list[str]): Lines naming the parameters, how often unused, on which ranks.
        warning (bool): The decision overrides what the user wrote, so it is logged as a
            warning.
    """
    mode: Mode
    requested: Union[str, bool]
    source: str
    reason: str
    lines: ConfigLines
    iteration: Optional[int] = None
    evidence: List[str] = field(default_factory=list)
    warning: bool = False

    def format(self) -> str:
        when = 'at build' if self.iteration is None else f'after iteration {self.iteration}'
        lines = [
            f'{self.lines.wrapper} decision ({when}): mode={self.mode!r} '
            f'(requested find_unused_parameters={self.requested!r}, from {self.source})',
            *textwrap.wrap(f'why: {self.reason}', 92, initial_indent='  ',
                           subsequent_indent='       '),
        ]
        if self.iteration is None:
            # Once, at build; a revision keeps the mode and only adds evidence.
            lines += textwrap.wrap(f'how: {MODE_EXPLANATIONS[self.mode]}', 92,
                                   initial_indent='  ', subsequent_indent='       ')
        lines += [f'  {line}' for line in self.evidence]
        return '\n'.join(lines)


#: What a run that accumulates gradients gets instead of DDP's graph search before torch 2.4.
ACCUMULATION_BUG = (
    'find_unused_parameters=True was written, but this run accumulates gradients '
    '(accumulative_counts={counts}) on torch {torch_version}, where DDP\'s graph search does '
    'not synchronise a parameter used in an earlier micro-step of the window but not in the '
    'last one (pytorch/pytorch#69031, fixed in torch 2.4 by pytorch/pytorch#124193): the '
    'ranks would silently train different weights. GuardedDDP trains this run with mode '
    "'complete' instead, which gives what the corrected graph search gives. To keep this "
    "choice without this warning, write find_unused_parameters='auto' in your config; to "
    'use DDP\'s graph search, upgrade torch to 2.4 or newer.')


def initial_decision(requested, source: str, static_graph: bool, lines: ConfigLines,
                     accumulative_counts: int = 1,
                     torch_version: Optional[str] = None) -> Decision:
    if static_graph:
        return Decision(Mode.STATIC_GRAPH, requested, source + ' + static_graph=True',
                        'static_graph=True was written; it is honoured.', lines)
    torch_version = torch_version or torch.__version__
    if requested is True and accumulative_counts > 1 \
            and not graph_search_accumulates_right(torch_version):
        return Decision(Mode.COMPLETE, requested, source,
                        ACCUMULATION_BUG.format(counts=accumulative_counts,
                                                torch_version=torch_version),
                        lines, warning=True)
    if requested is True:
        if source == CONFIG_TOP_LEVEL:
            # Often inherited from mmdet3d (SMOKE's config among others); a config cannot
            # delete an inherited key, only override it. No spaces in the line: the
            # message is wrapped at spaces and the line must stay whole.
            how = ("To let the guard choose, add this line to your config: "
                   "find_unused_parameters='auto' (it also overrides a True inherited from "
                   'an mmdet3d config).')
        elif lines is MMCV1_LINES:
            # The script passed True itself: what the config writes wins over it.
            how = ("To let the guard choose, add this line to your config: "
                   "find_unused_parameters='auto'.")
        else:
            how = "Remove it (or write 'auto') to let GuardedDDP choose."
        return Decision(Mode.FIND_UNUSED, requested, source,
                        f'find_unused_parameters=True was written; it is honoured. {how}',
                        lines)
    if requested is False:
        return Decision(Mode.STRICT, requested, source,
                        'find_unused_parameters=False was written; it is honoured.', lines)
    return Decision(Mode.COMPLETE, requested, source,
                    'nothing observed yet. Completion costs next to nothing while every '
                    'parameter is used and keeps the run alive if some go unused later '
                    '(a rare empty batch); the graph search would be paid every iteration, '
                    'and a static graph fails the first time the used set changes.', lines)


class DecisionPolicy:
    """Holds the current :class:`Decision` and revises it as evidence arrives.

    In ``'auto'`` the mode stays ``'complete'`` (correct for every pattern of unused
    parameters, and the cheapest of the correct ones), but the decision is re-issued, with its
    evidence, whenever the usage pattern changes: the first unused parameters; the unused
    set starting to change between iterations (a static graph would now fail); the ranks
    disagreeing (plain DDP's ranks that used the parameters would now wait in the all-reduce
    while the others fail). With an explicit request the mode
    is the user's and only the evidence is reported.

    Args:
        requested: ``'auto'``, True or False (already validated by
            :func:`~mmdet3d_ddp_guard.messages.mode_request.read_request`).
        source (str): Where the request came from.
        static_graph (bool): DDP's ``static_graph``.
        lines (ConfigLines): The words of the adapter's framework, for every message.
        accumulative_counts (int): The optim wrapper's gradient accumulation; with
            ``find_unused_parameters=True`` on torch < 2.4 it turns DDP's graph search
            into ``'complete'`` (see :data:`ACCUMULATION_BUG`).
        torch_version (str, optional): Defaults to the installed torch's.
    """

    def __init__(self, requested, source: str, static_graph: bool, lines: ConfigLines,
                 accumulative_counts: int = 1, torch_version: Optional[str] = None):
        self.lines = lines
        self.decision = initial_decision(requested, source, static_graph, lines,
                                         accumulative_counts, torch_version)
        # 'none', 'undefined_only', 'constant', 'changing' or 'rank_dependent'.
        self._pattern = 'none'

    def observe(self, usage: IterationUsage, statistics: UsageStatistics,
                table: ParamTable) -> Optional[Decision]:
        """Returns a new decision when the usage pattern changed, else None."""
        pattern = self._usage_pattern(statistics)
        if pattern == self._pattern:
            return None
        self._pattern = pattern
        previous = self.decision
        self.decision = Decision(previous.mode, previous.requested, previous.source,
                                 self._reason(pattern, statistics, previous),
                                 previous.lines, usage.iteration,
                                 evidence_lines(usage, statistics, table))
        return self.decision

    @staticmethod
    def _usage_pattern(statistics: UsageStatistics) -> str:
        if not statistics.iterations_with_unused:
            return 'none'
        if statistics.first_unreached_iteration is None:
            return 'undefined_only'
        if statistics.iterations_ranks_differ:
            return 'rank_dependent'
        if statistics.set_changes:
            return 'changing'
        return 'constant'

    @staticmethod
    def _reason(pattern: str, statistics: UsageStatistics, previous: Decision) -> str:
        if pattern == 'undefined_only':
            consequence = (f'parameters went unused from iteration '
                           f'{statistics.first_unused_iteration} on, with undefined gradients '
                           f'only: {UNDEFINED_GRADIENTS_ONLY}')
        else:
            first = statistics.first_unreached_iteration
            fails = outcome_line(FAILS, first)
            consequence = {
                'constant': 'parameters went unused from iteration '
                            f'{statistics.first_unused_iteration} on: {fails}',
                'changing': 'the set of unused parameters changes between iterations, so '
                            f'static_graph=True would fail too; {fails}',
                'rank_dependent': 'ranks disagree on which parameters are unused in the same '
                                  f'iteration: {fails}',
            }[pattern]
        if previous.mode == Mode.COMPLETE:
            return consequence + ' Completion keeps training correct; mode unchanged.'
        return consequence + f' The requested mode {previous.mode!r} is kept.'
