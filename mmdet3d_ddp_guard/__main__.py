"""The command line's entry point, which hands ``check`` and ``summarize`` their arguments:
``python -m mmdet3d_ddp_guard {check,summarize} ...`` (also the ``mmdet3d-ddp-guard``
script); ``--version`` says which frameworks it found, where, and from which distribution."""
import argparse
import sys

from .cli import check, summarize
from .cli.versions_report import VersionsAction


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='mmdet3d_ddp_guard')
    parser.add_argument('--version', action=VersionsAction,
                        help='the versions of this package, Python and every framework found, '
                             'where Python imports each from, and which distribution put it '
                             'there')
    commands = parser.add_subparsers(dest='command', required=True)
    for name, module, help_text in (
            ('check', check, 'would plain DDP fail on this config? (one process)'),
            ('summarize', summarize,
             "rebuild UnusedParamsHook's summary from a run's files (also a run that died)")):
        sub = commands.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(sub)
        sub.set_defaults(run=module.main)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == '__main__':
    sys.exit(main())
