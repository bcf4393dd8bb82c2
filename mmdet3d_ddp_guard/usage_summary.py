"""The end-of-training summary of unused parameters: a text table, a JSON file, a PNG."""
import json
import os.path as osp
from collections import OrderedDict
from typing import Dict, List, Optional

from .ddp_outcome import FAILS, OK, outcome_line
from .decision_policy import recommended_setting
from .param_table import ParamTable, format_rows, owner_of
from .usage_record import UsageStatistics


def summary_dict(table: ParamTable, statistics: UsageStatistics, world_size: int) -> Dict:
    setting, why = recommended_setting(statistics)
    first = statistics.first_unused_iteration
    return dict(
        iterations_seen=statistics.iterations_seen,
        world_size=world_size,
        num_params=len(table),
        iterations_with_unused=statistics.iterations_with_unused,
        iterations_ranks_differ=statistics.iterations_ranks_differ,
        unused_set_changes=statistics.set_changes,
        verdict=dict(
            plain_ddp_fails=first is not None,
            # A live run sees unused parameters, never a hang (it would be hanging).
            plain_ddp_outcome=OK if first is None else FAILS,
            plain_ddp_first_failure_iteration=first,
            recommended_setting=setting,
            why=why),
        parameters=[
            dict(table.describe(index),
                 iterations_unused=statistics.unused_iterations[index],
                 iterations_seen=statistics.iterations_seen,
                 ranks=sorted(statistics.ranks_unused[index]))
            for index in statistics.ever_unused
        ])


def summary_text(summary: Dict) -> str:
    verdict = summary['verdict']
    outcome = verdict['plain_ddp_outcome']
    if verdict['plain_ddp_fails']:
        first = verdict['plain_ddp_first_failure_iteration']
        fails = (f'YES: plain DDP (find_unused_parameters=False) would have failed at '
                 f'iteration {first}. {outcome_line(outcome, first)}')
    else:
        fails = 'no: plain DDP (find_unused_parameters=False) would not have failed.'
    lines = [
        f'Unused parameters over {summary["iterations_seen"]} iterations on '
        f'{summary["world_size"]} rank(s): {len(summary["parameters"])} of '
        f'{summary["num_params"]} parameters were unused at least once; '
        f'{summary["iterations_with_unused"]} iterations had some; the unused set changed '
        f'{summary["unused_set_changes"]} times; ranks differed in '
        f'{summary["iterations_ranks_differ"]} iterations.',
        f'Would plain DDP have failed? {fails}',
        f'Setting that fits: {verdict["recommended_setting"]}  ({verdict["why"]})',
    ]
    if summary['parameters']:
        rows = [(p['name'], str(tuple(p['shape'])), str(p['numel']), p['module_type'],
                 f'{p["iterations_unused"]}/{p["iterations_seen"]}',
                 ','.join(map(str, p['ranks']))) for p in summary['parameters']]
        lines += ['', format_rows(rows, ('parameter', 'shape', 'numel', 'module type',
                                         'unused/seen', 'ranks'))]
    return '\n'.join(lines)


def plot_unused_frequency(table: ParamTable, history: List[Dict], path: str,
                          bins: int = 50, max_modules: int = 40) -> Optional[str]:
    """PNG: for each module that ever had an unused parameter (rows), the fraction of its
    parameters' (iteration, rank) slots that were unused, per bin of iterations (columns).
    Returns the path, or None when there is nothing to draw."""
    if not history:
        return None
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np

    modules: 'OrderedDict[str, List[int]]' = OrderedDict()
    for line in history:
        for ids in line['unused_per_rank']:
            for index in ids:
                modules.setdefault(owner_of(table.names[index]) or '<root>', [])
    if not modules:
        return None
    for index, name in enumerate(table.names):
        owner = owner_of(name) or '<root>'
        if owner in modules:
            modules[owner].append(index)
    names = list(modules)[:max_modules]
    row_of = {i: r for r, m in enumerate(names) for i in modules[m]}
    first, last = history[0]['iter'], history[-1]['iter']
    bins = max(1, min(bins, last - first + 1))
    width = (last - first + 1) / bins
    unused = np.zeros((len(names), bins))
    slots = np.zeros((len(names), bins))
    sizes = np.array([len(modules[m]) for m in names], dtype=float)
    for line in history:
        column = min(bins - 1, int((line['iter'] - first) / width))
        slots[:, column] += sizes * len(line['unused_per_rank'])
        for ids in line['unused_per_rank']:
            for index in ids:
                if index in row_of:
                    unused[row_of[index], column] += 1
    frequency = np.divide(unused, slots, out=np.zeros_like(unused), where=slots > 0)
    figure, axes = plt.subplots(figsize=(10, 1.5 + 0.3 * len(names)))
    image = axes.imshow(frequency, aspect='auto', cmap='magma_r', vmin=0, vmax=1,
                        extent=(first, last + 1, len(names), 0), interpolation='nearest')
    axes.set_yticks(np.arange(len(names)) + 0.5, names, fontsize=8)
    axes.set_xlabel('iteration')
    axes.set_title('Unused parameters per module (fraction of parameter x rank slots)')
    figure.colorbar(image, ax=axes, fraction=0.03)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def write_summary(out_dir: str, prefix: str, table: ParamTable, statistics: UsageStatistics,
                  world_size: int, history: List[Dict], plot: bool) -> Dict[str, str]:
    """Writes ``<prefix>_summary.{txt,json}`` (and ``.png``); returns the paths."""
    summary = summary_dict(table, statistics, world_size)
    paths = dict(text=osp.join(out_dir, f'{prefix}_summary.txt'),
                 json=osp.join(out_dir, f'{prefix}_summary.json'))
    with open(paths['text'], 'w') as f:
        f.write(summary_text(summary) + '\n')
    with open(paths['json'], 'w') as f:
        json.dump(summary, f, indent=2)
    if plot:
        png = plot_unused_frequency(table, history, osp.join(out_dir, f'{prefix}_summary.png'))
        if png:
            paths['png'] = png
    return paths
