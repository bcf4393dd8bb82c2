"""How the guard treats unused parameters: the modes, the decision, and its revisions.

The policy is kept apart from the wrapper so that it can be read (and tested) on its own: it
turns the user's request (read by :mod:`~mmdet3d_ddp_guard.messages.mode_request`) into a
:class:`Decision`, and re-reads the evidence of every iteration to revise it when the usage
pattern changes. Its words (the reasons, the logged block, the evidence) are
:mod:`~mmdet3d_ddp_guard.messages.decision_text`'s and
:mod:`~mmdet3d_ddp_guard.messages.decision_evidence`'s.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Union

import torch

from ..environment.versions import graph_search_accumulates_right
from ..messages.config_lines import ConfigLines
from ..messages.decision_evidence import evidence_lines
from ..messages.decision_text import (NOTHING_OBSERVED, STATIC_GRAPH_HONOURED, STRICT_HONOURED,
                                      accumulation_bug_reason, graph_search_honoured_reason,
                                      revised_reason)
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

@dataclass
class Decision:
    """What the guard does about unused parameters, why, and on what evidence (logged as
    :func:`~mmdet3d_ddp_guard.messages.decision_text.decision_message`).

    Attributes:
        mode (Mode): ``'complete'``, ``'find_unused'``, ``'static_graph'`` or ``'strict'``
            (see :data:`~mmdet3d_ddp_guard.messages.decision_text.MODE_EXPLANATIONS`).
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


def initial_decision(requested, source: str, static_graph: bool, lines: ConfigLines,
                     accumulative_counts: int = 1,
                     torch_version: Optional[str] = None) -> Decision:
    if static_graph:
        return Decision(Mode.STATIC_GRAPH, requested, source + ' + static_graph=True',
                        STATIC_GRAPH_HONOURED, lines)
    torch_version = torch_version or torch.__version__
    if requested is True and accumulative_counts > 1 \
            and not graph_search_accumulates_right(torch_version):
        return Decision(Mode.COMPLETE, requested, source,
                        accumulation_bug_reason(accumulative_counts, torch_version, lines),
                        lines, warning=True)
    if requested is True:
        return Decision(Mode.FIND_UNUSED, requested, source,
                        graph_search_honoured_reason(source, lines), lines)
    if requested is False:
        return Decision(Mode.STRICT, requested, source, STRICT_HONOURED, lines)
    return Decision(Mode.COMPLETE, requested, source, NOTHING_OBSERVED, lines)


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
            into ``'complete'`` (see
            :data:`~mmdet3d_ddp_guard.messages.decision_text.ACCUMULATION_BUG`).
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
        reason = revised_reason(pattern, statistics.first_unused_iteration,
                                statistics.first_unreached_iteration, previous.mode,
                                completes=previous.mode == Mode.COMPLETE)
        self.decision = Decision(previous.mode, previous.requested, previous.source, reason,
                                 previous.lines, usage.iteration,
                                 evidence_lines(usage, statistics, statistics.ever_unused, table))
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
