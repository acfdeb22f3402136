"""Chaos-suite fixtures: the test modules import ``chaos_kit`` for the shared checks."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import chaos_kit
