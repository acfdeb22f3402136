"""scripts/check_docs.py: the repository's README and docs pass it, and a bad page is
reported link by link, anchor by anchor, path by path and module by module."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_docs.py"


def _load():
    spec = importlib.util.spec_from_file_location("check_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_docs"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


check_docs = _load()

README = """\
# Title

See [the guide](docs/guide.md#usage) and [a lost page](docs/nope.md).
Jump to [a section](#no-such-heading), or [the title](#title).
Code in `dataforge/ops/pii.py` and `dataforge/ops/gone.py`.
Call `dataforge.ops.pii.find_pii` or `dataforge.ops.missing`.
```
[ignored in code](nowhere.md) `dataforge/none.py` `dataforge.none`
```
Short forms: `ops/pii.py`, `ops/pii.find_pii`, `ops/pii.lost`, `ops.pii.nothing`.
Examples, not repository paths: `OUT/mds/`, `data/*.jsonl`, `loader.stats`, `report.html`.
"""

GUIDE = """\
# Guide

## Usage

Back to [the README](../README.md#title), [the logo](logo.png).
Not a heading there: [usage](../README.md#usage). Twice: [again](#usage-1).
"""


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(README, encoding="utf-8")
    (tmp_path / "docs" / "guide.md").write_text(GUIDE, encoding="utf-8")
    for package in ("dataforge", "dataforge/ops", "dataforge/loader"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "dataforge" / "ops" / "pii.py").write_text("def find_pii(): ...\n")
    return tmp_path


def test_the_repository_docs_pass():
    assert [str(p) for p in check_docs.check(ROOT)] == []


def test_each_kind_of_failure_is_reported_with_file_and_line(tmp_path):
    problems = [str(p) for p in check_docs.check(_repo(tmp_path))]
    assert problems == [
        "README.md:3: link: docs/nope.md -> docs/nope.md does not exist",
        "README.md:4: anchor: #no-such-heading: no heading of README.md has the anchor "
        "#no-such-heading",
        "README.md:5: path: dataforge/ops/gone.py does not exist",
        "README.md:6: module: dataforge.ops.missing: dataforge/ops/__init__.py defines no missing",
        "README.md:10: path: ops/pii.lost: ops/pii.py defines no lost",
        "README.md:10: module: ops.pii.nothing: dataforge/ops/pii.py defines no nothing",
        "docs/guide.md:5: link: logo.png -> docs/logo.png does not exist",
        "docs/guide.md:6: anchor: ../README.md#usage: no heading of README.md has the anchor "
        "#usage",
        "docs/guide.md:6: anchor: #usage-1: no heading of guide.md has the anchor #usage-1",
    ]


def test_the_command_prints_each_problem_and_exits_1(tmp_path):
    root = _repo(tmp_path)
    bad = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
    assert bad.returncode == 1
    assert (
        bad.stdout.splitlines()[0]
        == "README.md:3: link: docs/nope.md -> docs/nope.md does not exist"
    )
    (root / "README.md").write_text("# Title\n\nSee [the guide](docs/guide.md#usage).\n")
    (root / "docs" / "guide.md").write_text("# Guide\n\n## Usage\n")
    good = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
    assert (good.returncode, good.stdout) == (0, "")


def test_slugs_are_githubs():
    assert check_docs.slug("Loading: `dataforge.loader`") == "loading-dataforgeloader"
    assert check_docs.slug("perplexity_filter (KenLM)") == "perplexity_filter-kenlm"
    assert check_docs.slug("Watching a run: progress, report, metrics") == (
        "watching-a-run-progress-report-metrics"
    )
    assert check_docs.slug("A [linked](x.md) 数据 清洗") == "a-linked-数据-清洗"
