"""The import rules of docs/architecture.md hold, and breaking one fails the check.

``make lint`` runs ``lint-imports`` with the contracts in pyproject.toml. Here the same
contracts run on a copy of the source tree: unchanged they are kept; with one forbidden
import added on purpose (io importing the runtime, or a new cycle) the check fails and names
the broken contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and the contracts (no caches, no data)."""
    for package in ("dataforge", "trainer"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _add_import(path: Path, line: str) -> None:
    text = path.read_text()
    head, sep, tail = text.partition("from __future__ import annotations\n")
    path.write_text(head + sep + line + "\n" + tail)


def test_contracts_are_kept(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_io_importing_the_runtime_breaks_the_check(tree: Path) -> None:
    _add_import(tree / "dataforge" / "io" / "files.py", "import dataforge.runtime.manifest")
    result = _lint(tree)
    assert result.returncode == 1
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert "text and io never import ops, runtime, cli or the pipeline config BROKEN" in broken
    assert "dataforge layers (a layer imports only layers below it) BROKEN" in broken
    assert "dataforge.io.files -> dataforge.runtime.manifest" in result.stdout


def test_a_cycle_breaks_the_check(tree: Path) -> None:
    # text -> records is also forbidden ("text is pure"); records -> text closes a cycle.
    _add_import(tree / "dataforge" / "records.py", "import dataforge.text.cjk")
    _add_import(tree / "dataforge" / "text" / "cjk.py", "import dataforge.records")
    result = _lint(tree)
    assert result.returncode == 1
    assert "no import cycles between sibling packages or modules BROKEN" in result.stdout


def test_a_barrier_planner_importing_ray_breaks_the_check(tree: Path) -> None:
    # A planner lives beside its op and gets Ray actors only through its context's shards.
    _add_import(tree / "dataforge" / "ops" / "dedup" / "planner.py", "import ray")
    result = _lint(tree)
    assert result.returncode == 1
    assert "only the runtime imports ray BROKEN" in result.stdout
    assert "dataforge.ops.dedup.planner -> ray" in result.stdout
