"""The sample tests share a harness that drives prepare -> plan -> apply without Ray."""

from __future__ import annotations

import sys
from pathlib import Path

# pytest runs with --import-mode=importlib, which puts no test directory on sys.path; the
# test modules import their harness from sample_harness.py next to this file.
sys.path.insert(0, str(Path(__file__).parent))
