"""Rebuild UnusedParamsHook's summary from the files of a run, also one that died.

Reads ``<prefix>_table.json`` and ``<prefix>.jsonl`` in WORK_DIR (the hook's ``out_dir``,
by default the run's work dir), replays the per-iteration lines into the statistics the hook
keeps, and writes ``<prefix>_summary.txt`` / ``.json`` / ``.png`` as the hook does after
training, with the same verdict for the iterations in the file. A torn or garbled line (a
kill mid-write, a full disk) is dropped with a warning; iterations missing from the file are
named. Exits 0 when the summary is written, 1 when a file cannot be read or written, 2 on
bad usage (no such folder, no hook files in it, no complete line).
"""
import argparse
import logging
import os.path as osp
import sys

from ..environment.framework_table import FRAMEWORKS, rows_of
from ..environment.framework_table import framework as framework_row
from ..environment.frameworks import installed_frameworks
from ..reporting.history_file import (RecordedTable, history_path, missing_iterations,
                                      read_history, replay_statistics, table_path)
from ..reporting.summary import summary_dict, summary_text, write_summary

BAD_USAGE = 2


def _stderr_logger() -> logging.Logger:
    """Warnings go to this call's stderr (a new handler each call: stderr may be replaced)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter('%(levelname)s: %(message)s'))
    logger = logging.getLogger('mmdet3d_ddp_guard.summarize')
    logger.handlers = [handler]
    logger.propagate = False
    return logger


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('work_dir', help="the run's work dir (or the hook's out_dir)")
    parser.add_argument('--prefix', default='unused_params',
                        help="the hook's file_prefix (default: unused_params)")
    parser.add_argument('--no-plot', action='store_true', help='do not draw the PNG')
    parser.add_argument('--framework', choices=[row.name for row in FRAMEWORKS], default=None,
                        help='the framework the run trained with, whose words the setting '
                             'that fits is written in (default: the first installed, in the '
                             f'order {", ".join(row.name for row in FRAMEWORKS)})')


def main(args: argparse.Namespace) -> int:
    logger = _stderr_logger()
    if not osp.isdir(args.work_dir):
        print(f'summarize: no folder at {args.work_dir!r}.')
        return BAD_USAGE
    lines_path = history_path(args.work_dir, args.prefix)
    missing = [path for path in (table_path(args.work_dir, args.prefix), lines_path)
               if not osp.isfile(path)]
    if missing:
        print(f'summarize: {" and ".join(missing)} not found: is {args.work_dir!r} the work dir '
              '(or out_dir) of a run with UnusedParamsHook, and its file_prefix '
              f'{args.prefix!r} (--prefix)?')
        return BAD_USAGE
    try:
        table = RecordedTable.load(table_path(args.work_dir, args.prefix))
    except ValueError as error:
        print(f'summarize: {error}. The hook writes it once at the start of training; '
              'without it the ids in the per-iteration file have no names.')
        return BAD_USAGE
    try:
        lines = read_history(lines_path, logger, len(table))
    except OSError as error:
        print(f'summarize: cannot read {lines_path} ({error.strerror or error}).')
        return 1
    if not lines:
        print(f'summarize: {lines_path} holds no complete line: the run stopped before its '
              'first iteration ended.')
        return BAD_USAGE
    for first, last in missing_iterations(lines):
        logger.warning(f'{lines_path} has no line for iteration(s) {first}-{last}; the '
                       'summary covers the iterations it has.')
    world_size = max(len(line['unused_per_rank']) for line in lines)
    # The files do not say which framework wrote them; the post-mortem runs where it trained
    # (the first installed in the table's order: MMEngine where it is), unless told.
    framework = framework_row(args.framework) if args.framework \
        else rows_of(installed_frameworks())[0]
    summary = summary_dict(table, replay_statistics(len(table), lines), world_size,
                           framework.lines.guard)
    try:
        paths = write_summary(args.work_dir, args.prefix, summary, table, lines,
                              plot=not args.no_plot)
    except OSError as error:
        print(summary_text(summary))
        print(f'summarize: cannot write the summary files in {args.work_dir} '
              f'({error.strerror or error}).')
        return 1
    print(f'Rebuilt from {len(lines)} iterations in {lines_path} '
          f'(iterations {lines[0]["iter"]}-{lines[-1]["iter"]}):')
    print(summary_text(summary))
    print('Files: ' + ', '.join(paths.values()))
    return 0
