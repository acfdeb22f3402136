"""Check README.md and docs/*.md against the repository: relative links resolve, ``#anchors``
name a heading of their page (GitHub's slugs), backticked repository paths such as
``dataforge/ops/pii.py`` exist, and dotted names such as ``dataforge.loader.build_dataloader``
resolve to a module file (and a name it defines).

Usage: ``python scripts/check_docs.py [ROOT]``; one ``FILE:LINE: kind: message`` line per
problem, exit 1 if any.

A path is checked when its first part is a top-level source folder (``dataforge/``,
``tests/``, ...) or a package inside ``dataforge/`` or ``trainer/`` (``io/fs.py`` is
``dataforge/io/fs.py``); anything else in backticks (``OUT/mds/``, ``data/*.jsonl``) is an
example, not a path of the repository. A dotted name is checked when it starts with
``dataforge.``, ``trainer.`` or a subpackage or module of ``dataforge`` (``runtime.validate``).
"""

from __future__ import annotations

import ast
import os
import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Problem", "check", "doc_files", "main", "slug"]

SOURCE_DIRS = ("dataforge", "trainer", "tests", "benchmarks", "scripts", "pipelines", "docs", "mk")
PACKAGES = ("dataforge", "trainer")
# A last part that is one of these makes ``report.html`` a file name, not a module path.
FILE_SUFFIXES = frozenset(
    "html json jsonl md py yaml yml txt parquet bin png sh cpp h so zst gz toml mk csv svg"
    " model sbatch ftz arrow".split()
)
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[((?:[^\]\\]|\\.)*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
REPO_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)+/?")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


@dataclass(frozen=True)
class Problem:
    """One thing a document says that the repository does not hold."""

    file: str
    line: int
    kind: str  # "link", "anchor", "path" or "module"
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.kind}: {self.message}"


def doc_files(root: Path) -> list[Path]:
    """README.md and every Markdown page of docs/, in that order."""
    readme = [root / "README.md"] if (root / "README.md").is_file() else []
    return readme + sorted((root / "docs").glob("*.md"))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: markup dropped, lowercase, punctuation removed
    (letters, digits, ``_`` and ``-`` stay), spaces to hyphens."""
    text = LINK.sub(r"\1", heading).replace("`", "").strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    lines, in_fence = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            lines.append((number, line))
    return lines


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a page's headings (repeats get ``-1``, ``-2``, ...)."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for _, line in _prose_lines(path):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            repeat = counts.get(base, 0)
            counts[base] = repeat + 1
            found.add(f"{base}-{repeat}" if repeat else base)
    return found


def _check_link(root: Path, doc: Path, target: str, cache: dict[Path, set[str]]) -> str | None:
    """Why a relative link ``target`` of ``doc`` is broken, or None."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
        return None
    file_part, _, anchor = target.partition("#")
    dest = (doc.parent / file_part).resolve() if file_part else doc
    if not dest.exists():
        return f"link: {target} -> {os.path.relpath(dest, root)} does not exist"
    if anchor and dest.suffix == ".md":
        if dest not in cache:
            cache[dest] = anchors(dest)
        if anchor not in cache[dest]:
            return f"anchor: {target}: no heading of {dest.name} has the anchor #{anchor}"
    return None


def _path_candidates(root: Path, text: str) -> list[Path]:
    """Where a backticked path may live; empty when it is not a repository path."""
    first = text.split("/", 1)[0]
    if first in SOURCE_DIRS:
        return [root / text]
    return [root / pkg / text for pkg in PACKAGES if (root / pkg / first).is_dir()]


def _defined_names(module: Path) -> set[str]:
    """Top-level names a module defines, imports or lists in ``__all__``."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                names.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant))
    return names


def _resolve_module(root: Path, dotted: str) -> str | None:
    """Why ``dotted`` does not resolve to a module file and a name it defines, or None."""
    parts = dotted.split(".")
    base = root if parts[0] in PACKAGES else root / "dataforge"
    here = base
    for i, part in enumerate(parts):
        if (here / part / "__init__.py").is_file():
            here = here / part
            continue
        module = here / f"{part}.py"
        if module.is_file():
            rest = parts[i + 1 :]
        else:
            module, rest = here / "__init__.py", parts[i:]
        if not module.is_file():
            return f"module: {dotted}: no module {'.'.join(parts[: i + 1])}"
        if rest and rest[0] not in _defined_names(module):
            return f"module: {dotted}: {module.relative_to(root)} defines no {rest[0]}"
        return None
    return None


def _is_module_name(root: Path, text: str) -> bool:
    """Whether ``text`` names a module: ``dataforge.*``/``trainer.*``, a module of dataforge
    (``config.load_pipeline``) or a subpackage's module (``runtime.validate``; ``loader.stats``
    is an attribute of a variable named like the package)."""
    parts = text.split(".")
    if parts[-1] in FILE_SUFFIXES:
        return False
    if parts[0] in PACKAGES:
        return True
    package = root / "dataforge" / parts[0]
    if (root / "dataforge" / f"{parts[0]}.py").is_file():
        return True
    return (package / "__init__.py").is_file() and (
        (package / f"{parts[1]}.py").is_file() or (package / parts[1] / "__init__.py").is_file()
    )


def _check_path(root: Path, text: str) -> str | None:
    """Why a backticked repository path does not exist, or None. ``io/files.match_files``
    is ``io/files.py`` and a name it defines."""
    head, _, last = text.rpartition("/")
    stem, dot, name = last.partition(".")
    if dot and name not in FILE_SUFFIXES and "." not in name and not text.endswith("/"):
        candidates = [c for c in _path_candidates(root, f"{head}/{stem}.py")]
        found = [c for c in candidates if c.is_file()]
        if candidates and not found:
            return f"path: {text}: {head}/{stem}.py does not exist"
        if found and not any(name in _defined_names(c) for c in found):
            return f"path: {text}: {head}/{stem}.py defines no {name}"
        return None
    candidates = _path_candidates(root, text)
    if candidates and not any(c.exists() for c in candidates):
        return f"path: {text} does not exist"
    return None


def _check_code_span(root: Path, text: str) -> str | None:
    """Why a backticked repository path or module name does not resolve, or None."""
    if REPO_PATH.fullmatch(text):
        return _check_path(root, text)
    if DOTTED.fullmatch(text) and _is_module_name(root, text):
        return _resolve_module(root, text)
    return None


def check(root: Path) -> list[Problem]:
    """Every broken link, anchor, path and module name in ``root``'s README and docs."""
    root, problems, cache = root.resolve(), [], {}
    for doc in doc_files(root):
        shown = str(doc.relative_to(root))
        for number, line in _prose_lines(doc):
            spans = [m.group(2).strip() for m in CODE_SPAN.finditer(line)]
            prose = CODE_SPAN.sub("", line)
            found = [_check_link(root, doc, m.group(2), cache) for m in LINK.finditer(prose)]
            found += [_check_code_span(root, span) for span in spans]
            for why in filter(None, found):
                kind, message = why.split(": ", 1)
                problems.append(Problem(shown, number, kind, message))
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parents[1]
    problems = check(root)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
