"""Whether the positions of stalled ranks can still meet, and the words for it.

A pure function of the ranks' snapshots (:meth:`RankPosition.snapshot`), so that every rank
that reads the same snapshots writes the same diagnosis. The positions cannot meet when:

- a rank raised while others wait for it;
- a layer with a forward collective ran a different number of times on different ranks in
  the same iteration (a SyncBN in a branch that depends on the batch);
- the ranks that wait in collectives wait in different ones (a collective in the forward on
  some ranks, DDP's gradient all-reduce on others; a loss term reduced on some ranks only).

Waiting is legitimate when every waiting rank is in the same collective, or when the ranks
that wait wait for a rank that is busy outside collectives (rank 0 saving a checkpoint, a slow
data loader, a long validation): then the diagnosis says who waits for whom and the run goes
on.
"""
import textwrap
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .rank_position import GRADIENT_PHASES

NOT_ANSWERING = ('does not answer (still moving, gone, or stuck where its watchdog cannot '
                 'run)')


@dataclass
class Diagnosis:
    """``stop``: the positions cannot meet; ``text``: the same on every rank."""
    stop: bool
    text: str


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 1``, ``ranks 0 and 2``, ``ranks 0, 2 and 3``."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f'rank {ranks[0]}'
    return f"ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]}"


def _waits(ranks: Sequence[int]) -> str:
    return f'{ranks_text(ranks)} {"waits" if len(ranks) == 1 else "wait"}'


def _where(position: dict) -> str:
    if position['phase'] == 'data':
        return f"data for iteration {position['iteration'] + 1}"
    return f"iteration {position['iteration']}, {position['phase']}"


def _times(count: int) -> str:
    return {1: 'once', 2: 'twice'}.get(count, f'{count} times')


class _Ranks:
    """The snapshots, with the words for one rank's place."""

    def __init__(self, positions: Dict[int, Optional[dict]], module_types: Dict[str, str]):
        self.positions = positions
        self.module_types = module_types
        self.answered = {rank: p for rank, p in positions.items() if p is not None}

    def layer(self, name: str) -> str:
        return f'{name} ({self.module_types.get(name, "?")})'

    def collective(self, position: dict) -> Optional[Tuple[Tuple, str]]:
        """What identifies the collective the rank waits in, and its words; None for a rank
        outside collectives or one that raised."""
        if position['error'] is not None:
            return None
        iteration = position['iteration']
        if position['inside']:
            return (('layer', iteration, position['inside'], position['inside_call']),
                    f"{self.layer(position['inside'])}'s collective, call "
                    f"{position['inside_call']} of iteration {iteration}")
        if position['call']:
            call = position['call']
            return (('call', iteration, call['op'], call['where']),
                    f"{call['op']} called from {call['where']} ({_where(position)})")
        if position['phase'] in GRADIENT_PHASES:
            return ('gradients', iteration), f"DDP's gradient all-reduce ({_where(position)})"
        return None

    def place(self, rank: int) -> str:
        position = self.positions[rank]
        if position is None:
            return NOT_ANSWERING
        if position['error'] is not None:
            return f"raised {position['error']} ({_where(position)})"
        collective = self.collective(position)
        if collective is not None:
            _, words = collective
            return f'in {words}'
        return f'busy outside collectives ({_where(position)})'

    def where_each_rank_is(self) -> List[str]:
        lines = []
        for rank in sorted(self.positions):
            position = self.positions[rank]
            seq = '' if position is None or position['seq'] is None else \
                f" [collectives issued: {position['seq']}]"
            lines.append(f'  rank {rank}: {self.place(rank)}{seq}')
        return lines

    def count_mismatch(self) -> Optional[str]:
        """The first layer whose collective ran a different number of times on different
        ranks in one iteration, in words."""
        known: Dict[Tuple[int, str], Dict[int, int]] = {}
        for rank, position in self.answered.items():
            for iteration, calls in position['finished'].items():
                if int(iteration) < 0:
                    continue
                for name in self.module_types:
                    known.setdefault((int(iteration), name), {})[rank] = calls.get(name, 0)
            if position['inside']:
                key = (position['iteration'], position['inside'])
                known.setdefault(key, {})[rank] = position['inside_call']
        for (iteration, name), counts in sorted(known.items()):
            if len(set(counts.values())) < 2:
                continue
            by_count: Dict[int, List[int]] = {}
            for rank, count in counts.items():
                by_count.setdefault(count, []).append(rank)
            parts = []
            for count, ranks in sorted(by_count.items(), reverse=True):
                ran = 'did not' if count == 0 else (
                    f'ran it {_times(count)}' if parts else
                    f"ran {self.layer(name)}'s collective {_times(count)}")
                parts.append(f'{ranks_text(ranks)} {ran}')
            return (f'in iteration {iteration} {", ".join(parts)}: a collective in a '
                    'branch that depends on the batch.')
        return None


FIX = ('Fix: run `python -m mmdet3d_ddp_guard check CONFIG --world-size N` to see which '
       'batches take the branch; keep the collective on every rank (run the branch on '
       'every rank, with an empty or zero-weighted input where it has nothing to do), or use '
       "a plain BatchNorm or GroupNorm there (norm_cfg=dict(type='BN')).")


def diagnose(positions: Dict[int, Optional[dict]], module_types: Dict[str, str],
             stalled_for: float) -> Diagnosis:
    """Judges the ranks' snapshots (None for a rank that has not answered).

    Args:
        positions (dict): rank -> snapshot or None, for every rank of the group.
        module_types (dict): layer name -> class name of the layers with a forward
            collective (the same model on every rank).
        stalled_for (float): The stall timeout, for the words.
    """
    ranks = _Ranks(positions, module_types)
    raised = sorted(rank for rank, p in ranks.answered.items() if p['error'] is not None)
    collectives = {rank: ranks.collective(p) for rank, p in ranks.answered.items()}
    waiting = {rank: collective for rank, collective in collectives.items()
               if collective is not None}
    busy = sorted(rank for rank, p in ranks.answered.items()
                  if p['error'] is None and rank not in waiting)
    silent = sorted(rank for rank, p in positions.items() if p is None)
    mismatch = ranks.count_mismatch()
    causes = []
    if raised and len(raised) < len(positions):
        causes.append(f'{ranks_text(raised)} raised while the other ranks wait for '
                      f'{"it" if len(raised) == 1 else "them"}.')
    if mismatch:
        causes.append(f'The ranks cannot meet: {mismatch}')
    elif len({identity for identity, _ in waiting.values()}) > 1:
        groups: Dict[Tuple, List[int]] = {}
        words: Dict[Tuple, str] = {}
        for rank, (identity, text) in sorted(waiting.items()):
            groups.setdefault(identity, []).append(rank)
            words[identity] = text
        parts = [f'{ranks_text(members)} in {words[identity]}'
                 for identity, members in groups.items()]
        causes.append(f"The ranks cannot meet: they wait in different collectives "
                      f"({'; '.join(parts)}), which never pair up: a collective that runs "
                      'on some ranks only (in a branch that depends on the batch, or a loss '
                      'term reduced only when a class has boxes).')
    header = f'GuardedDDP stall guard: no rank has moved for {stalled_for:g} s.'
    lines = ['Where each rank is:'] + ranks.where_each_rank_is()
    if causes:
        lines += causes + [FIX if mismatch or not raised else
                           'Fix: the error of the rank that raised, above in its log.',
                           'Every rank ends the run now.']
        return Diagnosis(True, _indented(header, lines))
    if waiting and busy:
        lines.append(f'{_waits(sorted(waiting))} for {ranks_text(busy)}, busy outside '
                     'collectives: a slow phase, not a hang; the run goes on.')
    elif waiting and silent:
        lines.append(f'{_waits(sorted(waiting))} for {ranks_text(silent)}, which '
                     f'{"has" if len(silent) == 1 else "have"} not answered; the run goes '
                     'on, and the guard looks again.')
    elif waiting:
        lines.append('Every rank waits in the same collective: slow, not a hang; the run '
                     'goes on.')
    else:
        lines.append('No rank waits in a collective: a slow phase, not a hang; the run goes '
                     'on.')
    return Diagnosis(False, _indented(header, lines))


def _indented(header: str, lines: List[str]) -> str:
    # Like every multi-line message of this package: log filters that keep a record's
    # indented lines keep all of it.
    return header + '\n' + textwrap.indent('\n'.join(lines), '  ')
