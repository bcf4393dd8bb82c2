"""The end-of-training summary of unused parameters: a text table, a JSON file, a PNG."""
import json
import os.path as osp
import textwrap
from collections import OrderedDict
from typing import Dict, List, Optional

from .recommended_setting import recommended_setting
from ..guard.iteration_usage import UsageStatistics
from ..messages.parameter_text import format_rows, owner_of
from ..messages.ddp_outcome import FAILS, OK, UNDEFINED_GRADIENTS_ONLY, outcome_line


def summary_dict(table, statistics: UsageStatistics, world_size: int,
                 guard_setting: str) -> Dict:
    """The summary as a JSON-ready dict: counts, the verdict, and a row per parameter that was
    ever unused. ``table`` is a :class:`ParamTable` or, in a post-mortem, a
    :class:`~.history_file.RecordedTable`; ``guard_setting`` the config line that puts the
    guard on this framework's run."""
    setting, why = recommended_setting(statistics, guard_setting)
    first = statistics.first_unreached_iteration
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
        fails = f'YES: {outcome_line(outcome, first)}'
    elif summary['parameters']:
        fails = f'no: {UNDEFINED_GRADIENTS_ONLY}'
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


def unused_by_module_and_rank(names: List[str], history: List[Dict], max_bins: int = 200,
                              max_modules: int = 30) -> Dict:
    """The numbers behind the PNG, binned so that 100k iterations and hundreds of modules stay
    readable.

    Rows are the modules (owners of parameters) that left a parameter unused at least once,
    most often unused first, at most ``max_modules``; columns are bins of whole iterations,
    at most ``max_bins``. ``fraction[rank, row, column]`` is the fraction of the column's
    iterations (those with a line in ``history``) in which the module left at least one of its
    parameters unused on that rank; NaN where the column has no line of that rank.

    Returns:
        dict: ``modules`` (row names), ``modules_ever_unused`` (how many, before the cut),
        ``world_size``, ``edges`` (``columns + 1`` integer iteration bounds), ``width``
        (iterations per column), ``fraction`` (array ``world_size x rows x columns``), or
        an empty dict when no module was ever unused.
    """
    import numpy as np

    owners = [owner_of(name) or '<root>' for name in names]
    world_size = max(len(line['unused_per_rank']) for line in history)
    # (iteration, rank) events per module: the sort key, and which modules exist at all.
    events: 'OrderedDict[str, int]' = OrderedDict()
    for line in history:
        for ids in line['unused_per_rank']:
            for module in {owners[i] for i in ids}:
                events[module] = events.get(module, 0) + 1
    if not events:
        return {}
    order = {owner: position for position, owner in enumerate(dict.fromkeys(owners))}
    modules = sorted(events, key=lambda m: (-events[m], order[m]))[:max_modules]
    row_of = {module: row for row, module in enumerate(modules)}
    first, last = history[0]['iter'], history[-1]['iter']
    width = -(-(last - first + 1) // max_bins)  # ceil: whole iterations per column
    columns = -(-(last - first + 1) // width)
    unused = np.zeros((world_size, len(modules), columns))
    seen = np.zeros((world_size, 1, columns))
    for line in history:
        column = (line['iter'] - first) // width
        for rank, ids in enumerate(line['unused_per_rank']):
            seen[rank, 0, column] += 1
            for module in {owners[i] for i in ids}:
                if module in row_of:
                    unused[rank, row_of[module], column] += 1
    with np.errstate(invalid='ignore', divide='ignore'):
        fraction = np.where(seen > 0, unused / seen, np.nan)
    return dict(modules=modules, modules_ever_unused=len(events), world_size=world_size,
                edges=[first + width * k for k in range(columns + 1)], width=width,
                fraction=fraction)


def plot_unused_by_rank(names: List[str], history: List[Dict], path: str,
                        max_bins: int = 200, max_modules: int = 30,
                        max_rank_panels: int = 8) -> Optional[str]:
    """PNG: one panel per rank, a row per module that was ever unused, a column per bin of
    iterations (see :func:`unused_by_module_and_rank`), with a caption saying what a cell
    means. Returns the path, or None when there is nothing to draw."""
    if not history:
        return None
    data = unused_by_module_and_rank(names, history, max_bins, max_modules)
    if not data:
        return None
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import ListedColormap, LogNorm
    from matplotlib.ticker import MaxNLocator

    modules, edges, width = data['modules'], data['edges'], data['width']
    panels = min(data['world_size'], max_rank_panels)
    panel_height = (0.2 if len(modules) > 10 else 0.3) * len(modules)
    gap = 0.5  # inches between panels, for the rank title
    figure, axes = plt.subplots(panels, 1, sharex=True, squeeze=False,
                                figsize=(11, 1.5 + panels * (panel_height + gap)))
    # A log scale from one unused iteration in a thousand, so a rare skip still shows;
    # exactly 0 (always used) is white, no record is grey.
    colormap = ListedColormap(matplotlib.colormaps['magma_r'](np.linspace(0.15, 1, 256)))
    colormap = colormap.with_extremes(under='white', bad='#c8c8c8')
    norm = LogNorm(vmin=1e-3, vmax=1)
    # Cell k spans iterations [edge k, edge k+1): centred on its iteration when one wide.
    extent = (edges[0] - 0.5, edges[-1] - 0.5, len(modules), 0)
    for rank, ax in enumerate(axes[:, 0]):
        fraction = data['fraction'][rank]
        image = ax.imshow(np.where(fraction == 0, 1e-9, fraction), aspect='auto',
                          cmap=colormap, norm=norm, extent=extent, interpolation='nearest')
        ax.set_yticks([row + 0.5 for row in range(len(modules))], modules,
                      fontsize=8 if len(modules) <= 20 else 6)
        ax.set_title(f'rank {rank}', loc='left', fontsize=10, fontweight='bold')
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1, 0].set_xlabel('iteration')
    figure.colorbar(image, ax=axes[:, 0].tolist(), fraction=0.025, pad=0.02,
                    label='fraction of iterations unused (white: 0)')
    shown = [f'{len(modules)} of {data["modules_ever_unused"]} modules that were ever unused'
             + (', most often unused first' if len(modules) > 1 else '')]
    if panels < data['world_size']:
        shown.append(f'ranks 0-{panels - 1} of {data["world_size"]}')
    columns = ('one column per iteration' if width == 1 else
               f'one column per {width} iterations')
    figure.suptitle('Unused parameters per module and rank', fontsize=12)
    caption = (f'A cell is the fraction of its column\'s iterations ({columns}) in which the '
               'module left at least one of its parameters unused on that rank (no gradient '
               'from that backward): white = always used, black = unused in every iteration, '
               f'grey = no record. Shown: {"; ".join(shown)}.')
    figure.text(0.01, 0.01, textwrap.fill(caption, 165), fontsize=8, va='bottom')
    height = figure.get_figheight()
    figure.subplots_adjust(left=0.2, right=0.88, top=1 - 0.6 / height, bottom=1.1 / height,
                           hspace=gap / panel_height)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def write_summary(out_dir: str, prefix: str, summary: Dict, table, history: List[Dict],
                  plot: bool) -> Dict[str, str]:
    """Writes ``<prefix>_summary.{txt,json}`` and, with ``plot``, ``.png``; returns the paths.

    Args:
        summary (dict): From :func:`summary_dict`.
        table (ParamTable | RecordedTable): Names of the ids in ``history``.
        history (list[dict]): The per-iteration lines (see :mod:`.history_file`).
    """
    paths = dict(text=osp.join(out_dir, f'{prefix}_summary.txt'),
                 json=osp.join(out_dir, f'{prefix}_summary.json'))
    with open(paths['text'], 'w') as f:
        f.write(summary_text(summary) + '\n')
    with open(paths['json'], 'w') as f:
        json.dump(summary, f, indent=2)
    if plot:
        png = plot_unused_by_rank(table.names, history, osp.join(out_dir,
                                                                 f'{prefix}_summary.png'))
        if png:
            paths['png'] = png
    return paths
