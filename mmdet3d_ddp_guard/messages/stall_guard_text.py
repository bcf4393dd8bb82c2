"""The stall guard's words: where each rank waits, why the ranks cannot meet, what happens
next, and the guard's option error and its own faults.

Functions of data: the stall guard (:mod:`mmdet3d_ddp_guard.stall_guard`) judges the ranks'
snapshots and hands over what it found as plain values (a collective log's entries, a
rank's place, ranks grouped); every rank that reads the same snapshots writes the same text.
"""
import textwrap
from typing import List, Optional, Sequence, Tuple

from .config_lines import ConfigLines

NOT_ANSWERING = ('does not answer (still moving, gone, or stuck where its watchdog cannot '
                 'run)')



def collective_fix(lines: ConfigLines) -> str:
    """The fix of a collective that runs on some ranks only, in the framework's words."""
    return (f'Fix: {lines.find_the_branch}; keep the collective on every rank (run the branch '
            'on every rank, with an empty or zero-weighted input where it has nothing to do), '
            f'or use a plain BatchNorm or GroupNorm there ({lines.plain_norm}).')

CANNOT_MEET = ('a collective that runs on some ranks only (in a branch that depends on '
               'the batch, or a loss term reduced only when a class has boxes) pairs with '
               'another collective or with none.')
#: What the run does after a diagnosis that does not stop it, by what the guard saw.
GOES_ON = {
    'nonblocking': ("The ranks' collectives agree so far. This backend's collectives do not "
                    'block the host, so where each host waits says nothing of a hang: a '
                    "possible hang, left to the process group's own timeout; the run goes "
                    'on.'),
    'same_collective': 'Every rank waits in the same collective: slow, not a hang; the run '
                       'goes on.',
    'no_wait': 'No rank waits in a collective: a slow phase, not a hang; the run goes on.',
}


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


def ordinal(number: int) -> str:
    suffix = 'th' if 10 <= number % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(
        number % 10, 'th')
    return f'{number}{suffix}'


def collective_text(entry: Sequence) -> str:
    """A collective log's entry (``(index, op, numel, iteration, nth, issuer, ...)``) in
    words: ``all_gather in refiner.1 (PluginSyncBN2d).forward, projects/x/norm.py:14, its
    1st collective of iteration 3``."""
    op, iteration, nth, issuer = entry[1], entry[3], entry[4], entry[5]
    if issuer[0] == 'ddp':
        return f"DDP's gradient bucket {issuer[1]} of iteration {iteration}"
    module, cls, function, path, line = issuer
    where = (f'{op} in {module} ({cls}).{function}, {path}:{line}' if module is not None
             else f'{op} called from {path}:{line} in {function}')
    return f'{where}, its {ordinal(nth)} collective of iteration {iteration}'


def issued_text(entry: Sequence, with_numel: bool) -> str:
    """What a rank issued, in the words that tell it from the others' (its element count
    too, ``with_numel``, where only the counts differ): ranks with the same words share a
    line of :func:`collective_differs_text`."""
    return collective_text(entry) + (f' ({entry[2]} elements)' if with_numel else '')


def place_text(place: Optional[dict]) -> str:
    """Where a rank is, from the place the stall guard found for it (None: it did not
    answer): ``error``, ``call`` (``op`` and ``where``), ``in_gradient_all_reduce``,
    ``fetching_data``, ``iteration``, ``phase``, ``last`` (its last collective's entry) and
    ``issued``."""
    if place is None:
        return NOT_ANSWERING
    if place['fetching_data']:
        when = f"data for iteration {place['iteration'] + 1}"
    else:
        when = f"iteration {place['iteration']}, {place['phase']}"
    if place['error'] is not None:
        return f"raised {place['error']} ({when})"
    call = place['call']
    if call is not None:
        text = f"in {call['op']} called from {call['where']} ({when})"
    elif place['in_gradient_all_reduce']:
        text = f"in DDP's gradient all-reduce ({when})"
    else:
        text = f'busy outside collectives ({when})'
    if place['last'] is not None:
        text += f"; its last collective: {collective_text(place['last'])}"
    return text + f" [collectives issued: {place['issued']}]"


def _on_group(group: Optional[str]) -> str:
    return '' if group is None else f' on the group of {group}'


def digests_differ_text(group: Optional[str], known_from: int, kept: int) -> str:
    """The ranks' sequences on ``group`` (None: the world) differ before the entries they
    keep (``kept`` per group), which begin at index ``known_from``."""
    return (f'their collectives{_on_group(group)} differ before their '
            f'{ordinal(known_from + 1)} (the digests of their sequences differ; the entries '
            f'each rank keeps, {kept} per group, begin past the first difference).')


def collective_differs_text(group: Optional[str], index: int,
                            issued_by: Sequence[Tuple[Sequence[int], str]],
                            gone_past: Sequence[Tuple[int, int]]) -> str:
    """The ``index``-th collective on ``group`` differs: ``issued_by`` holds (ranks,
    :func:`issued_text`) per distinct collective; ``gone_past`` (rank, iteration) the ranks
    that went on without issuing it."""
    parts = [f'{ranks_text(ranks)}: {words}' for ranks, words in issued_by]
    for rank, iteration in gone_past:
        parts.append(f'{ranks_text([rank])}: none (it went on to iteration {iteration} '
                     'without it)')
    return (f'their {ordinal(index + 1)} collective{_on_group(group)} differs: '
            + '; '.join(parts) + '.')


def deadlock_text(issued: Sequence[Tuple[int, Sequence[int]]]) -> str:
    """Every rank waits in communication; ``issued``: (count, ranks) with different
    counts of collectives issued."""
    parts = [f'{ranks_text(ranks)} after {count}' for count, ranks in issued]
    return (f"every rank waits in communication, and they have issued different numbers of "
            f"collectives ({'; '.join(parts)}): none of them can move. A collective the "
            'guard does not record (DDP\'s buckets under find_unused_parameters=True or '
            'static_graph, a C++ collective) may be the one that differs.')


def diagnosis_text(stalled_for: float, places: Sequence[Tuple[Sequence[int], str]],
                   raised: Sequence[int], others_wait: bool, mismatch: Optional[str],
                   deadlock: Optional[str], goes_on: Optional[str], waiting: Sequence[int],
                   busy: Sequence[int], silent: Sequence[int], words: ConfigLines) -> str:
    """The diagnosis every rank logs.

    Args:
        stalled_for (float): The stall timeout, in seconds.
        places: (ranks, :func:`place_text`) per distinct place.
        raised (list[int]): The ranks that raised.
        others_wait (bool): Some ranks raised while the others wait for them.
        mismatch (str, optional): The collectives that differ (:func:`digests_differ_text`
            or :func:`collective_differs_text`).
        deadlock (str, optional): Why ranks that all wait cannot move (:func:`deadlock_text`).
        goes_on (str, optional): None when the run ends; else a key of :data:`GOES_ON`, or
            ``'slow_rank'`` (``waiting`` wait for ``busy``) or ``'silent'`` (``silent``
            have not answered).
        words (ConfigLines): The framework's words, for the fix.
    """
    header = f'mmdet3d_ddp_guard stall guard: no rank has moved for {stalled_for:g} s.'
    lines = ['Where each rank is:'] + [f'  {ranks_text(ranks)}: {place}'
                                       for ranks, place in places]
    if goes_on is None:
        causes = []
        if others_wait:
            causes.append(f'{ranks_text(raised)} raised while the other ranks wait for '
                          f'{"it" if len(raised) == 1 else "them"}.')
        if mismatch is not None:
            causes.append(f'The ranks cannot meet: {mismatch} So {CANNOT_MEET}')
        elif deadlock is not None:
            causes.append(f'The ranks cannot meet: {deadlock}')
        lines += causes + [collective_fix(words) if not raised or len(causes) > 1 else
                           'Fix: the error of the rank that raised, in its log.',
                           'Every rank ends the run now.']
    elif goes_on == 'slow_rank':
        lines.append(f'{ranks_text(waiting)} {"waits" if len(waiting) == 1 else "wait"} for '
                     f'{ranks_text(busy)}, busy outside collectives: a slow phase, not a '
                     'hang; the run goes on.')
    elif goes_on == 'silent':
        lines.append(f'{ranks_text(silent)} {"has" if len(silent) == 1 else "have"} not '
                     'answered; the run goes on, and the guard looks again.')
    else:
        lines.append(GOES_ON[goes_on])
    # Like every multi-line message of this package: log filters that keep a record's
    # indented lines keep all of it.
    return header + '\n' + textwrap.indent('\n'.join(lines), '  ')


def stall_timeout_error(timeout, lines: ConfigLines) -> str:
    return (f'{lines.wrapper}: stall_timeout must be a positive number of seconds, or None to '
            f'turn the stall guard off, not {timeout!r}; e.g. '
            f'{lines.option("stall_timeout", 600)}')


def stall_guard_moved(lines: ConfigLines, earlier_model: str, model: str) -> str:
    """``model``'s new wrapper took the stall guard from the live one around
    ``earlier_model`` (the class names of the wrapped models)."""
    return (f'{lines.wrapper} (around {model}): the stall guard moves to this wrapper. A '
            f'process has one, and the {lines.wrapper} built before it (around '
            f'{earlier_model}), still alive and not stopped, is no longer watched for hangs. '
            'The newest wrapper is the one that trains in a sweep or a notebook; if the '
            f'earlier one is, build this one with {lines.option("stall_timeout", None)} and '
            'the stall guard stays where it was.')


def exit_callback_failed(error: BaseException) -> str:
    return (f'mmdet3d_ddp_guard stall guard: an exit callback failed: '
            f'{type(error).__name__}: {error}')


def store_fault(error: BaseException, max_ticks: int) -> str:
    return (f'mmdet3d_ddp_guard stall guard: cannot compare positions through the store '
            f'({type(error).__name__}: {error}); it tries again after 1, 2, 4 ... ticks (at '
            f'most {max_ticks}).')


def own_fault(error: BaseException) -> str:
    return (f'mmdet3d_ddp_guard stall guard: {type(error).__name__}: {error}; it goes on '
            'watching.')
