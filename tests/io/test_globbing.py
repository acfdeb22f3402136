"""``expand_glob`` matches what ``glob.glob`` matches, each real file once, without
following a symlink loop more than once."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from dataforge.io.globbing import expand_glob, may_match_below

FILES = ["x.jsonl", "a/y.jsonl", "a/b/z.jsonl", ".h/h.jsonl", "a/.k.jsonl", "c/w.txt",
         "a/b/q1.txt", "a/b/q2.txt", "[x]/br.jsonl", "a/^c.txt", "a/-d.txt"]  # fmt: skip
PATTERNS = ["**/*.jsonl", "**", "*/*.jsonl", "**/b/*.jsonl", "a/**/*.jsonl", "**/q[12].txt",
            "**/q[!1].txt", "**/[!.]*.txt", "**/[^]c.txt", "a/[-]d.txt", "**/.k.jsonl", "**/.*",
            ".h/*.jsonl", "**/*", "*", "a/**", "**/b/**", "a/b/q?.txt", "x.jsonl"]  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    return tmp_path


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_matches_as_glob(tree: Path, pattern: str) -> None:
    full = str(tree / pattern)
    expected = sorted(p for p in glob.glob(full, recursive=True) if os.path.isfile(p))
    assert [path for path, _, _ in expand_glob(full)] == expected


def test_links_and_loops_give_each_real_file_once(tree: Path) -> None:
    (tree / "a" / "b" / "up").symlink_to("..")
    (tree / "a" / "b" / "top").symlink_to("../..")
    (tree / "alias.jsonl").symlink_to("x.jsonl")
    (tree / "dangling.jsonl").symlink_to("missing.jsonl")
    found = expand_glob(str(tree / "**" / "*.jsonl"))
    reals = [real for _, real, _ in found]
    assert len(reals) == len(set(reals)) == 4  # x, a/y, a/b/z, [x]/br
    assert {Path(r).name for r in reals} == {"x.jsonl", "y.jsonl", "z.jsonl", "br.jsonl"}
    assert all(Path(r) == Path(r).resolve() for r in reals)


@pytest.mark.parametrize(
    ("pattern", "folder", "reads"),
    [("d/*.jsonl", "d/out", False), ("d/**/*.jsonl", "d/out", True), ("d/*/x.jsonl", "d/out", True),
     ("d/*.jsonl", "d", True), ("d/*.jsonl", "e", False), ("d/*/x.jsonl", "d/o/p", False)],
)  # fmt: skip
def test_may_match_below(tmp_path: Path, pattern: str, folder: str, reads: bool) -> None:
    (tmp_path / "d").mkdir()
    assert may_match_below(str(tmp_path / pattern), tmp_path / folder) is reads
