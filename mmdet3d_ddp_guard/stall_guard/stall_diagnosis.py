"""Whether the positions of stalled ranks can still meet: the stall guard's judgement.

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
who waits for whom and the run goes on. What it found is handed to
:mod:`~mmdet3d_ddp_guard.messages.stall_guard_text` as plain values, for the words.
"""
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..messages.config_lines import ConfigLines
from ..messages.stall_guard_text import (collective_differs_text, deadlock_text,
                                         diagnosis_text, digests_differ_text, issued_text,
                                         place_text)
from .collective_log import KEPT_PER_GROUP, OTHER_THREAD, WORLD
from .phases import GRADIENT_PHASES, Phase


@dataclass
class Diagnosis:
    """``stop``: the positions cannot meet; ``text``: the same on every rank."""
    stop: bool
    text: str


def _issued(position: dict, group: str = WORLD) -> int:
    return position['groups'].get(group, {}).get('issued', 0)


def _waits_in_communication(position: dict) -> bool:
    return position['call'] is not None or position['phase'] in GRADIENT_PHASES


def _place(position: Optional[dict]) -> Optional[dict]:
    """Where a rank is, as :func:`~mmdet3d_ddp_guard.messages.stall_guard_text.place_text`
    reads it."""
    if position is None:
        return None
    entries = position['groups'].get(WORLD, {}).get('entries')
    return dict(error=position['error'], call=position['call'],
                in_gradient_all_reduce=position['phase'] in GRADIENT_PHASES,
                fetching_data=position['phase'] == Phase.DATA,
                iteration=position['iteration'], phase=position['phase'],
                last=entries[-1] if entries else None, issued=_issued(position))


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
        named_group = None if group == WORLD else group
        if _differ_before(known_from, published):
            return digests_differ_text(named_group, known_from, KEPT_PER_GROUP)
        training_thread = OTHER_THREAD not in group
        for index in range(known_from, max(issued.values(), default=0)):
            differs = _compare(index, published, issued, members, training_thread)
            if differs is not None:
                return collective_differs_text(named_group, index, *differs)
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
             ranks: Dict[int, dict], training_thread: bool
             ) -> Optional[Tuple[List[Tuple[List[int], str]], List[Tuple[int, int]]]]:
    """None when the ranks' ``index``-th collectives pair; else (ranks, their collective's
    words) per distinct collective, and (rank, iteration) per rank that went on without
    it."""
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
    # Ranks whose collectives read the same share a line.
    by_collective: Dict[str, List[int]] = {}
    for rank, entry in sorted(entries.items()):
        words = issued_text(entry, with_numel=entry[2] is not None and len(numels) > 1)
        by_collective.setdefault(words, []).append(rank)
    return ([(ranks, words) for words, ranks in by_collective.items()],
            [(rank, ranks[rank]['iteration']) for rank in gone_past])


def _different_counts(positions: Dict[int, dict]) -> Optional[List[Tuple[int, List[int]]]]:
    """On a backend that blocks: when every rank waits in communication at different counts
    of collectives issued, (count, ranks) per count; else None."""
    if not all(_waits_in_communication(p) for p in positions.values()):
        return None
    counts: Dict[int, List[int]] = {}
    for rank, position in sorted(positions.items()):
        counts.setdefault(_issued(position), []).append(rank)
    return sorted(counts.items()) if len(counts) > 1 else None


def diagnose(positions: Dict[int, Optional[dict]], stalled_for: float,
             blocking: bool, lines: ConfigLines) -> Diagnosis:
    """Judges the ranks' snapshots (None for a rank that has not answered).

    Args:
        positions (dict): rank -> snapshot or None, for every rank of the group.
        stalled_for (float): The stall timeout, for the words.
        blocking (bool): Whether the backend's collectives block the host until every rank
            has joined (gloo): then the host positions are evidence too.
        lines (ConfigLines): The words of the framework that trains, for the fix.
    """
    answered = {rank: p for rank, p in positions.items() if p is not None}
    raised = sorted(rank for rank, p in answered.items() if p['error'] is not None)
    silent = sorted(rank for rank, p in positions.items() if p is None)
    waiting = sorted(rank for rank, p in answered.items()
                     if p['error'] is None and _waits_in_communication(p))
    busy = sorted(rank for rank, p in answered.items()
                  if p['error'] is None and rank not in waiting)
    # Ranks at the same place share a line: one line per place, not per rank.
    places: Dict[str, List[int]] = {}
    for rank in sorted(positions):
        places.setdefault(place_text(_place(positions[rank])), []).append(rank)
    others_wait = bool(raised) and len(raised) < len(positions)
    mismatch = first_mismatch(answered)
    counts = None
    if mismatch is None and blocking and not silent and not raised:
        counts = _different_counts(answered)
    deadlock = deadlock_text(counts) if counts is not None else None
    stop = others_wait or mismatch is not None or deadlock is not None
    if stop:
        goes_on = None
    elif not blocking and not silent:
        goes_on = 'nonblocking'
    elif waiting and busy:
        goes_on = 'slow_rank'
    elif silent:
        goes_on = 'silent'
    else:
        goes_on = 'same_collective' if waiting else 'no_wait'
    places_of_ranks = [(ranks, text) for text, ranks in places.items()]
    return Diagnosis(stop, diagnosis_text(stalled_for, places_of_ranks, raised, others_wait,
                                          mismatch, deadlock, goes_on, waiting, busy, silent,
                                          lines))
