"""From simulated iterations to what plain DDP, ``static_graph=True`` and GuardedDDP would do.

Rules (torch's DDP, verified in this project's tests and notes):

- ``hangs`` in an iteration where a SyncBN-type layer ran a different number of times on
  different ranks (some skipped it): every rank waits in its forward collective.
- else ``fails`` where some rank left parameters unused: plain DDP raises "Expected to have
  finished reduction" on that rank at its next forward.
- ``static_graph=True`` records every rank's unused set in the first iteration and needs
  exactly that set on that rank afterwards: it ``fails`` the first iteration a rank's set
  differs from its own first one (and ``hangs`` like plain DDP on a skipped collective).
- GuardedDDP trains every pattern of unused parameters; a skipped collective hangs it too.
"""
import json
from typing import Dict, List, Optional, Sequence

from ..guard.param_table import ParamTable
from ..messages.ddp_outcome import FAILS, HANGS, OK, PLAIN_DDP
from ..messages.parameter_text import grouped_lines
from .forward_collective_counts import config_key_of
from .simulated_ranks import SimulatedIteration


def predict(table: ParamTable, iterations: Sequence[SimulatedIteration], world_size: int,
            collective_types: Dict[str, str], sync_norm_keys: Sequence[str] = ()) -> Dict:
    """The prediction as a JSON-ready dict (the contract of ``check --json``).

    Args:
        table (ParamTable): Names of the parameter ids in ``iterations``.
        iterations (list[SimulatedIteration]): What every simulated rank did.
        world_size (int): Number of simulated ranks.
        collective_types (dict[str, str]): SyncBN-type layer name -> its class name.
        sync_norm_keys (list[str]): Config keys that build SyncBN-type layers (see
            :func:`.forward_collective_counts.sync_norm_cfg_keys`), to name the one to change.
    """
    per_iteration, skipped = [], []
    for it in iterations:
        hung = _skipped_collectives(it, collective_types, sync_norm_keys)
        skipped += hung
        failing_ranks = [rank for rank, ids in enumerate(it.unreached_per_rank) if ids]
        outcome = HANGS if hung else FAILS if failing_ranks else OK
        per_iteration.append(dict(
            iter=it.iteration,
            outcome=outcome,
            # The ranks that break the run: those that skipped the collective, or that
            # left parameters unreached (an undefined gradient alone breaks nothing).
            ranks=(sorted({r for entry in hung for r in entry['ranks_skipped']}) if hung
                   else failing_ranks),
            unused_per_rank=[[table.names[i] for i in ids] for ids in it.unused_per_rank]))
    plain = _first(per_iteration, lambda line: line['outcome'])
    static = _first(per_iteration, _static_graph_outcome(iterations))
    guarded = _first(per_iteration, lambda line: HANGS if line['outcome'] == HANGS else OK)
    return dict(world_size=world_size, iterations=len(iterations), plain_ddp=plain,
                static_graph=static, guarded_ddp=guarded, per_iteration=per_iteration,
                forward_collectives_skipped=skipped)


def _skipped_collectives(it: SimulatedIteration, types: Dict[str, str],
                         keys: Sequence[str]) -> List[Dict]:
    entries = []
    for module, calls in it.collective_calls.items():
        most = max(calls)
        if min(calls) == most:
            continue
        # A rank that ran the layer fewer times than another skipped a call its partners
        # wait for (usually 0 against 1).
        entries.append(dict(
            module=module, type=types[module], iter=it.iteration,
            ranks_skipped=[rank for rank, count in enumerate(calls) if count < most],
            ranks_ran=[rank for rank, count in enumerate(calls) if count == most],
            calls_per_rank=list(calls),
            config_key=config_key_of(module, keys)))
    return entries


def _static_graph_outcome(iterations: Sequence[SimulatedIteration]):
    first_sets = iterations[0].unused_per_rank if iterations else ()

    def outcome(line: Dict) -> str:
        if line['outcome'] == HANGS:
            return HANGS
        index = line['iter'] - iterations[0].iteration
        return FAILS if iterations[index].unused_per_rank != first_sets else OK
    return outcome


def _first(per_iteration: List[Dict], outcome_of) -> Dict:
    """``{"outcome", "first_iteration"}`` of the first iteration that is not ok."""
    for line in per_iteration:
        outcome = outcome_of(line)
        if outcome != OK:
            return dict(outcome=outcome, first_iteration=line['iter'])
    return dict(outcome=OK, first_iteration=None)


def prediction_text(prediction: Dict, table: ParamTable, max_rows: int = 20,
                    limit: int = 12) -> str:
    """The prediction for a reader: the verdicts, the parameters and layers, the fix."""
    n = prediction['world_size']
    plain = prediction['plain_ddp']
    lines = [f'Simulated {n} rank(s) of DDP for {prediction["iterations"]} iteration(s) in one '
             'process (the config\'s sampler as each rank; one optimizer step per iteration '
             'on the rank-averaged gradient).']
    first = plain['first_iteration']
    # The why of the outcome is the summary's (ddp_outcome's words); here the where.
    if plain['outcome'] == OK:
        lines.append(f'{PLAIN_DDP} on {n} rank(s): {OK}.')
    else:
        line = prediction['per_iteration'][first - prediction['per_iteration'][0]['iter']]
        lines.append(f'{PLAIN_DDP} on {n} rank(s): {plain["outcome"]} at iteration {first}, '
                     f'caused by rank(s) {_ranks(line["ranks"])}.')
        if plain['outcome'] == FAILS:
            for rank, names in enumerate(line['unused_per_rank']):
                if names:
                    ids = [table.names.index(name) for name in names]
                    lines.append(f'  rank {rank}, iteration {first}: {len(names)} parameters '
                                 'unused')
                    lines += [f'    {row}' for row in grouped_lines(table, ids, limit)]
    for entry in _first_per_module(prediction['forward_collectives_skipped']):
        where = (f'; change {entry["config_key"]} (e.g. dict(type=\'BN\') or '
                 'dict(type=\'GN\', num_groups=...))' if entry['config_key'] else '')
        lines.append(f'  {entry["module"]} ({entry["type"]}) ran on rank(s) '
                     f'{_ranks(entry["ranks_ran"])} and not on rank(s) '
                     f'{_ranks(entry["ranks_skipped"])}, first in iteration '
                     f'{entry["iter"]}{where}.')
    static = prediction['static_graph']
    lines.append('static_graph=True: ' + (
        'trains (every rank keeps its first iteration\'s unused set).'
        if static['outcome'] == OK else
        f'{static["outcome"]} at iteration {static["first_iteration"]}'
        + (' (a rank\'s unused set differs from its first iteration\'s).'
           if static['outcome'] == FAILS else '.')))
    guarded = prediction['guarded_ddp']
    lines.append('The guard (mmdet3d_ddp_guard): ' + (
        'trains it.' if guarded['outcome'] == OK else
        f'hangs too at iteration {guarded["first_iteration"]} (no DDP option helps a '
        'forward collective that only some ranks run).'))
    lines += ['', _per_iteration_table(prediction, max_rows)]
    return '\n'.join(lines)


def _ranks(ranks: Sequence[int]) -> str:
    return ', '.join(map(str, ranks))


def _first_per_module(entries: List[Dict]) -> List[Dict]:
    seen = {}
    for entry in entries:
        seen.setdefault(entry['module'], entry)
    return list(seen.values())


def _per_iteration_table(prediction: Dict, max_rows: int) -> str:
    """``iter  outcome  rank 0  rank 1 ...``: unused parameters per rank, ``H`` where a rank
    skipped a forward collective."""
    skipped = {(e['iter'], r) for e in prediction['forward_collectives_skipped']
               for r in e['ranks_skipped']}
    rows = prediction['per_iteration']
    header = 'iter  outcome ' + ''.join(f' rank {r:<3}' for r in range(prediction['world_size']))
    body = []
    for line in rows[:max_rows]:
        cells = ''.join(f' {("H" if (line["iter"], r) in skipped else "") + str(len(names)):<8}'
                        for r, names in enumerate(line['unused_per_rank']))
        body.append(f'{line["iter"]:<5} {line["outcome"]:<8}{cells}')
    if len(rows) > max_rows:
        body.append(f'... {len(rows) - max_rows} more iterations (see --json / --png)')
    return '\n'.join(['Unused parameters per iteration and rank (H: skipped a forward '
                      'collective):', header, *body])


def write_json(prediction: Dict, path: str) -> None:
    with open(path, 'w') as f:
        json.dump(prediction, f, indent=2)


def plot_prediction(prediction: Dict, path: str) -> Optional[str]:
    """PNG: iterations (rows) x simulated ranks (columns), shaded by the number of unused
    parameters, ``F`` where that rank makes plain DDP fail, ``H`` where it skipped a forward
    collective (plain DDP hangs). Returns the path."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np

    rows = prediction['per_iteration']
    n = prediction['world_size']
    counts = np.array([[len(names) for names in line['unused_per_rank']] for line in rows],
                      dtype=float).reshape(len(rows), n)
    skipped = {(e['iter'], r) for e in prediction['forward_collectives_skipped']
               for r in e['ranks_skipped']}
    figure, axes = plt.subplots(figsize=(max(5.0, 2 + 0.6 * n), 1.8 + 0.25 * len(rows)))
    vmax = max(1.0, counts.max())
    image = axes.imshow(counts, aspect='auto', cmap='Reds', vmin=0, vmax=vmax,
                        interpolation='nearest')
    for row, line in enumerate(rows):
        for rank in range(n):
            mark = 'H' if (line['iter'], rank) in skipped else \
                'F' if line['outcome'] == FAILS and counts[row, rank] else ''
            if mark:
                axes.text(rank, row, mark, ha='center', va='center', fontsize=8,
                          fontweight='bold',
                          color='white' if counts[row, rank] > vmax / 2 else 'black')
    axes.set_xticks(range(n), [str(r) for r in range(n)])
    step = max(1, len(rows) // 30)
    axes.set_yticks(range(0, len(rows), step), [str(rows[i]['iter'])
                                                for i in range(0, len(rows), step)])
    axes.set_xlabel('simulated rank')
    axes.set_ylabel('iteration')
    plain = prediction['plain_ddp']
    verdict = (OK if plain['outcome'] == OK else
               f'{plain["outcome"]} at iteration {plain["first_iteration"]}')
    axes.set_title(f'Plain DDP on {n} ranks: {verdict}\nshade: unused parameters\n'
                   'F: fails, H: skipped a forward collective', fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.05)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
