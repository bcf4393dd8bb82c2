"""Sphinx configuration of the documentation: README.md and docs/**, in MyST Markdown.

The source folder is the repository root (``make docs`` runs ``sphinx-build -c docs .``), so
that README.md is a page of the site and the links between it and docs/ are plain relative
links, which GitHub follows too. The API reference comes from the docstrings (autodoc);
``tests/tooling/test_docs.py`` builds the site with warnings as errors.
"""
import argparse
import importlib
import os
import sys

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# autodoc imports the package from this checkout, installed or not.
sys.path.insert(0, ROOT)

project = 'mmdet3d_ddp_guard'
extensions = ['myst_parser', 'sphinx.ext.autodoc', 'sphinx.ext.napoleon']
root_doc = 'docs/index'
include_patterns = ['README.md', 'docs/**']
# Pruned from the walk of the repository root, which would otherwise read all of .venv.
# docs/zoo/README.md is written by the zoo run (benchmarks/zoo.py), not by hand, and built
# as a page like the others.
exclude_patterns = ['.venv', '.git', 'build', 'data', 'work_dirs']
myst_heading_anchors = 3
autodoc_member_order = 'bysource'
# Defaults as written in the source: `not_given()`, not a sentinel's repr.
autodoc_preserve_defaults = True
html_title = project
html_show_sourcelink = False


class CliHelp(SphinxDirective):
    """``{cli-help} check``: a command's usage and options, from its own argparse definition,
    so the reference cannot fall behind the code. A dotted name is a module of the repository
    run with ``python -m`` (``{cli-help} demo.make_tiny_data``); ``demo`` is the demo's."""

    required_arguments = 1

    def run(self):
        command = self.arguments[0]
        if command == 'demo' or '.' in command:
            module = importlib.import_module(
                command + ('.__main__' if command == 'demo' else ''))
            prog = f'python -m {command}'
        else:
            module = importlib.import_module(f'mmdet3d_ddp_guard.cli.{command}')
            prog = f'python -m mmdet3d_ddp_guard {command}'
        parser = argparse.ArgumentParser(
            prog=prog,
            formatter_class=lambda prog: argparse.HelpFormatter(prog, width=92))
        module.add_arguments(parser)
        text = parser.format_help()
        return [nodes.literal_block(text, text)]


def setup(app):
    app.add_directive('cli-help', CliHelp)
