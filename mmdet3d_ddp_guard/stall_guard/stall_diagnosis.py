"""Whether the positions of stalled ranks can still meet, and the words for it.

A pure function of the ranks' snapshots (:meth:`RankPosition.snapshot`), so that every rank
that reads the same snapshots writes the same diagnosis. The run ends only on evidence that
holds on every backend:

- a rank raised while the others wait for it;
- the ranks' collectives differ (:class:`~.collective_log.CollectiveLog`): on some process
  group, the n-th collective of one rank is not the n-th of another (another op, or another
  element count where every rank must pass the same; the iteration is not compared, as a
  joined rank's or another thread's collectives carry another iteration), their sequences'
  digests differ before the entries they keep, or one rank issued a collective of the
  training thread in an iteration that another rank has left without issuing it. Ranks pair
  collectives by order, so such ranks never meet, or compute with the wrong partner.

On a backend whose collectives block the host until every rank has joined (gloo), the host
positions are evidence too: when every rank waits in communication (inside a collective
call, or in DDP's gradient all-reduce) and the ranks have not issued the same number of
collectives, none of them can move. On a backend whose collectives return at once (NCCL),
the host blocks at its first synchronisation instead, wherever that is, so there the host
positions only describe: agreeing collectives are logged as a possible hang, and the run is
left to the process group's own timeout.

Everything else is waiting that can end (a rank busy outside collectives: a checkpoint, a
slow data loader, a long validation; every rank in the same collective): the diagnosis says
who waits for whom and the run goes on.
"""
import textwrap
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from .collective_log import KEPT_PER_GROUP, OTHER_THREAD, WORLD, describe, ordinal
from .phases import GRADIENT_PHASES, Phase

NOT_ANSWERING = ('does not answer (still moving, gone, or stuck where its watchdog cannot '
                 'run)')

FIX = ('Fix: run `python -m mmdet3d_ddp_guard check CONFIG --world-size N` to see which '
       'batches take the branch; keep the collective on every rank (run the branch on '
       'every rank, with an empty or zero-weighted input where it has nothing to do), or use '
       "a plain BatchNorm or GroupNorm there (norm_cfg=dict(type='BN')).")
CANNOT_MEET = ('a collective that runs on some ranks only (in a branch that depends on '
               'the batch, or a loss term reduced only when a class has boxes) pairs with '
               'another collective or with none.')


@dataclass
class Diagnosis:
    """``stop``: the positions cannot meet; ``text``: the same on every rank."""
    stop: bool
    text: str


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 1``, ``ranks 0 and 2``, ``ranks 0, 2 and 3``, ``ranks 0-511 and 513-1023``
    (runs of four and more as a range: the words stay short at 1024 ranks)."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f'rank {ranks[0]}'
    runs: List[List[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    parts: List[str] = []
    for run in runs:
        parts += [f'{run[0]}-{run[-1]}'] if len(run) >= 4 else [str(rank) for rank in run]
    if len(parts) == 1:
        return f'ranks {parts[0]}'
    return f"ranks {', '.join(parts[:-1])} and {parts[-1]}"


def _waits(ranks: Sequence[int]) -> str:
    return f'{ranks_text(ranks)} {"waits" if len(ranks) == 1 else "wait"}'


def _where(position: dict) -> str:
    if position['phase'] == Phase.DATA:
        return f"data for iteration {position['iteration'] + 1}"
    return f"iteration {position['iteration']}, {position['phase']}"


def _issued(position: dict, group: str = WORLD) -> int:
    return position['groups'].get(group, {}).get('issued', 0)


def _waits_in_communication(position: dict) -> bool:
    return position['call'] is not None or position['phase'] in GRADIENT_PHASES


def _host(position: dict) -> str:
    """Where the training thread is, in words."""
    if position['error'] is not None:
        return f"raised {position['error']} ({_where(position)})"
    call = position['call']
    if call is not None:
        return f"in {call['op']} called from {call['where']} ({_where(position)})"
    if position['phase'] in GRADIENT_PHASES:
        return f"in DDP's gradient all-reduce ({_where(position)})"
    return f'busy outside collectives ({_where(position)})'


def _place(position: Optional[dict]) -> str:
    if position is None:
        return NOT_ANSWERING
    text = _host(position)
    if position['error'] is None:
        entries = position['groups'].get(WORLD, {}).get('entries')
        if entries:
            text += f'; its last collective: {describe(entries[-1])}'
        text += f' [collectives issued: {_issued(position)}]'
    return text


def first_mismatch(positions: Dict[int, dict]) -> Optional[str]:
    """The first collective, on any group, that the ranks cannot pair, in words; None when
    the published collectives agree. Ranks that raised are left out (they are named)."""
    ranks = {rank: p for rank, p in positions.items() if p['error'] is None}
    for group in sorted({g for p in ranks.values() for g in p['groups']},
                        key=lambda g: (g != WORLD, g)):
        # The world holds every rank; a rank without a subgroup's record is not in it.
        members = {rank: p for rank, p in ranks.items() if group == WORLD or group in p['groups']}
        published = {rank: {entry[0]: entry for entry in p['groups'].get(group, {}).get(
            'entries', [])} for rank, p in members.items()}
        issued = {rank: _issued(p, group) for rank, p in members.items()}
        known_from = max((min(entries) if entries else issued[rank])
                         for rank, entries in published.items())
        group_words = '' if group == WORLD else f' on the group of {group}'
        if _differ_before(known_from, published):
            return (f'their collectives{group_words} differ before their '
                    f'{ordinal(known_from + 1)} (the digests of their sequences differ; the '
                    f'entries each rank keeps, {KEPT_PER_GROUP} per group, begin past the '
                    'first difference).')
        training_thread = OTHER_THREAD not in group
        for index in range(known_from, max(issued.values(), default=0)):
            words = _compare(index, published, issued, members, training_thread)
            if words is not None:
                return f'their {ordinal(index + 1)} collective{group_words} differs: {words}'
    return None


def _differ_before(index: int, published: Dict[int, dict]) -> bool:
    """Whether the ranks' entries at ``index`` agree while their digests (of every entry up
    to it) do not: they differ before the kept entries."""
    entries = [entries[index] for entries in published.values() if index in entries]
    if len(entries) < 2 or any(len(entry) < 7 for entry in entries):
        return False
    return len({(entry[1], entry[2]) for entry in entries}) == 1 and \
        len({entry[6] for entry in entries}) > 1


def _compare(index: int, published: Dict[int, dict], issued: Dict[int, int],
             ranks: Dict[int, dict], training_thread: bool) -> Optional[str]:
    entries = {rank: published[rank].get(index) for rank in ranks if issued[rank] > index}
    if any(entry is None for entry in entries.values()):
        return None  # older than a rank's kept entries: not comparable
    missing = sorted(rank for rank in ranks if issued[rank] <= index)
    ops = {entry[1] for entry in entries.values()}
    numels = {entry[2] for entry in entries.values() if entry[2] is not None}
    iterations = {entry[3] for entry in entries.values()}
    # A rank that has not issued it yet may still do so, unless it left that iteration (a
    # rule of the training thread's collectives: another thread's carry no iteration of
    # their own).
    gone_past = [rank for rank in missing if ranks[rank]['iteration'] > min(iterations)] \
        if entries and training_thread else []
    if len(ops) < 2 and len(numels) < 2 and not gone_past:
        return None
    parts = []
    by_words: Dict[str, List[int]] = {}
    for rank, entry in sorted(entries.items()):
        words = describe(entry)
        if entry[2] is not None and len(numels) > 1:
            words += f' ({entry[2]} elements)'
        by_words.setdefault(words, []).append(rank)
    for words, members in by_words.items():
        parts.append(f'{ranks_text(members)}: {words}')
    for rank in gone_past:
        parts.append(f'{ranks_text([rank])}: none (it went on to iteration '
                     f"{ranks[rank]['iteration']} without it)")
    return '; '.join(parts) + '.'


def _deadlock(positions: Dict[int, dict]) -> Optional[str]:
    """On a backend that blocks: every rank waits in communication, at different counts."""
    if not all(_waits_in_communication(p) for p in positions.values()):
        return None
    counts: Dict[int, List[int]] = {}
    for rank, position in sorted(positions.items()):
        counts.setdefault(_issued(position), []).append(rank)
    if len(counts) < 2:
        return None
    parts = [f'{ranks_text(members)} after {count}' for count, members in sorted(counts.items())]
    return (f"every rank waits in communication, and they have issued different numbers of "
            f"collectives ({'; '.join(parts)}): none of them can move. A collective the "
            'guard does not record (DDP\'s buckets under find_unused_parameters=True or '
            'static_graph, a C++ collective) may be the one that differs.')


def diagnose(positions: Dict[int, Optional[dict]], stalled_for: float,
             blocking: bool) -> Diagnosis:
    """Judges the ranks' snapshots (None for a rank that has not answered).

    Args:
        positions (dict): rank -> snapshot or None, for every rank of the group.
        stalled_for (float): The stall timeout, for the words.
        blocking (bool): Whether the backend's collectives block the host until every rank
            has joined (gloo): then the host positions are evidence too.
    """
    answered = {rank: p for rank, p in positions.items() if p is not None}
    raised = sorted(rank for rank, p in answered.items() if p['error'] is not None)
    silent = sorted(rank for rank, p in positions.items() if p is None)
    waiting = sorted(rank for rank, p in answered.items()
                     if p['error'] is None and _waits_in_communication(p))
    busy = sorted(rank for rank, p in answered.items()
                  if p['error'] is None and rank not in waiting)
    header = f'mmdet3d_ddp_guard stall guard: no rank has moved for {stalled_for:g} s.'
    # Ranks at the same place share a line: one line per place, not per rank.
    places: Dict[str, List[int]] = {}
    for rank in sorted(positions):
        places.setdefault(_place(positions[rank]), []).append(rank)
    lines = ['Where each rank is:'] + [f'  {ranks_text(members)}: {place}'
                                       for place, members in places.items()]
    causes = []
    if raised and len(raised) < len(positions):
        causes.append(f'{ranks_text(raised)} raised while the other ranks wait for '
                      f'{"it" if len(raised) == 1 else "them"}.')
    mismatch = first_mismatch(answered)
    if mismatch:
        causes.append(f'The ranks cannot meet: {mismatch} So {CANNOT_MEET}')
    elif blocking and not silent and not raised:
        deadlock = _deadlock(answered)
        if deadlock:
            causes.append(f'The ranks cannot meet: {deadlock}')
    if causes:
        lines += causes + [FIX if not raised or len(causes) > 1 else
                           'Fix: the error of the rank that raised, in its log.',
                           'Every rank ends the run now.']
        return Diagnosis(True, _indented(header, lines))
    if not blocking and not silent:
        lines.append("The ranks' collectives agree so far. This backend's collectives do not "
                     'block the host, so where each host waits says nothing of a hang: a '
                     "possible hang, left to the process group's own timeout; the run goes "
                     'on.')
    elif waiting and busy:
        lines.append(f'{_waits(waiting)} for {ranks_text(busy)}, busy outside '
                     'collectives: a slow phase, not a hang; the run goes on.')
    elif silent:
        lines.append(f'{ranks_text(silent)} {"has" if len(silent) == 1 else "have"} not '
                     'answered; the run goes on, and the guard looks again.')
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
