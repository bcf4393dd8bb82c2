"""Puts the repository's root on ``sys.path`` when a benchmark runs as a script: the
benchmarks train the tests' toy models (``tests/toys``) and use the demo's data writers and
launcher (``demo/``), which stay in the repository and are not installed."""
import os.path as osp
import sys

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
