"""Fixtures of the loader tests (shard writers live in loader_shards.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib, which puts no test directory on sys.path; the
# test modules import their shard writers from loader_shards.py next to this file.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def cache_dir(tmp_path: Path) -> str:
    """A private cache dir for the loader's per-run stream directories."""
    return str(tmp_path / "loader-cache")
