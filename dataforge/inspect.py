"""``dataforge inspect``: summarize, print and verify MDS datasets without streaming's
shared-memory machinery (shards are read and decoded by :mod:`dataforge.io.mds`, which
refuses unsafe indexes before any shard is opened).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from dataforge.io.mds import (
    MDSCorruptError,
    MDSFormatError,
    dataset_dir,
    iter_samples,
    iter_shard_samples,
    read_index,
    shard_bytes,
    shard_file,
    shard_hash,
)
from dataforge.text.terminal import printable, printable_json

__all__ = ["InspectError", "inspect_path", "local_dataset", "summarize", "verify_dataset"]

HIST_EDGES = [0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536, 1 << 62]


InspectError = MDSFormatError
"""PATH is not a readable, safe MDS dataset (the MDS codec's error)."""


def _file_problems(root: Path, i: int, key: str, info: dict[str, Any]) -> list[str]:
    try:
        file = shard_file(root, info["basename"])
    except MDSCorruptError as exc:
        return [f"shard {i}: {exc}"]
    data = file.read_bytes()
    problems = []
    if len(data) != info["bytes"]:
        problems.append(
            f"shard {i}: {info['basename']} has {len(data)} bytes, index says {info['bytes']}"
        )
    for algo, expected in (info.get("hashes") or {}).items():
        try:
            if shard_hash(algo, data) != expected:
                problems.append(f"shard {i}: {info['basename']} {algo} mismatch")
        except ValueError:
            problems.append(f"shard {i}: {info['basename']} unknown hash {algo!r}")
    return problems


def verify_dataset(path: Path) -> list[str]:
    """Check every shard's size, recorded hashes and sample count. Returns the problems.

    Raises:
        MDSFormatError: not a dataset; MDSCorruptError: an index too malformed to check.
    """
    root = dataset_dir(path)
    problems = []
    for i, shard in enumerate(read_index(root)["shards"]):
        found = []
        for key in ("zip_data", "raw_data"):
            info = shard.get(key)
            # A compressed shard's raw file is optional (streaming removes it).
            if not info or (key == "raw_data" and shard.get("zip_data")
                            and not (root / info["basename"]).exists()):  # fmt: skip
                continue
            found += _file_problems(root, i, key, info)
        if not found:
            try:
                count = sum(1 for _ in iter_shard_samples(shard_bytes(root, shard), shard))
                if count != shard["samples"]:
                    found.append(f"shard {i}: {count} samples, index says {shard['samples']}")
            except MDSFormatError as exc:
                found.append(f"shard {i}: cannot decode ({exc})")
        problems += found
    return problems


def _histogram(values: list[int]) -> list[dict[str, int]]:
    counts, _ = np.histogram(np.asarray(values, dtype=np.int64), bins=HIST_EDGES)
    return [
        {"lo": lo, "hi": hi, "count": int(c)}
        for lo, hi, c in zip(HIST_EDGES[:-1], HIST_EDGES[1:], counts, strict=True)
        if c
    ]


def _check_counts(root: Path, decoded: int, indexed: int) -> dict[str, Any] | None:
    """The decoded total must match the index and the run's manifest; returns the
    manifest's per-source counts (None without a manifest)."""
    if decoded != indexed:  # iter_samples checks each shard; this is the total
        raise MDSCorruptError(f"{root}: decoded {decoded} samples, index says {indexed}")
    manifest = root.parent / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        recorded = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MDSCorruptError(f"{manifest}: unreadable ({exc})") from None
    if not isinstance(recorded, dict):
        raise MDSCorruptError(f"{manifest}: not a run manifest (a mapping)")
    output, counts = recorded.get("output"), recorded.get("counts")
    records = output.get("records") if isinstance(output, dict) else None
    if isinstance(records, int) and records != decoded:
        raise MDSCorruptError(f"{root}: holds {decoded} samples, the run's manifest says {records}")
    return counts.get("by_source") if isinstance(counts, dict) else None


def summarize(path: Path) -> dict[str, Any]:
    root = dataset_dir(path)
    index = read_index(root)
    shards = index["shards"]
    per_source: Counter[str] = Counter()
    text_lengths: dict[str, list[int]] = {}
    token_lengths: dict[str, list[int]] = {}
    ppl: dict[str, list[float]] = {}
    for record in iter_samples(root):
        src = str(record.get("source", "?"))
        per_source[src] += 1
        text_lengths.setdefault(src, []).append(len(record.get("text", "")))
        if "num_tokens" in record:
            token_lengths.setdefault(src, []).append(int(record["num_tokens"]))
        meta = record.get("meta")
        if isinstance(meta, dict) and isinstance(meta.get("ppl"), (int, float)):
            ppl.setdefault(src, []).append(float(meta["ppl"]))
    first = shards[0] if shards else {}
    summary: dict[str, Any] = {
        "path": str(root),
        "shards": len(shards),
        "samples": sum(s["samples"] for s in shards),
        "bytes_raw": sum(s["raw_data"]["bytes"] for s in shards),
        "bytes_compressed": sum(s["zip_data"]["bytes"] for s in shards if s.get("zip_data")),
        "compression": first.get("compression"),
        "hashes": first.get("hashes", []),
        "columns": dict(
            zip(first.get("column_names", []), first.get("column_encodings", []), strict=True)
        ),
        "per_source": dict(sorted(per_source.items())),
        "text_chars_histogram": {s: _histogram(v) for s, v in sorted(text_lengths.items())},
    }
    if token_lengths:
        summary["token_length_histogram"] = {
            s: _histogram(v) for s, v in sorted(token_lengths.items())
        }
    if ppl:
        summary["perplexity_histogram"] = {
            s: [
                {"lo": float(lo), "hi": float(hi), "count": int(c)}
                for lo, hi, c in zip(
                    *(lambda h: (h[1][:-1], h[1][1:], h[0]))(np.histogram(v, bins=10)), strict=True
                )
            ]
            for s, v in sorted(ppl.items())
        }
    manifest_counts = _check_counts(root, sum(per_source.values()), summary["samples"])
    if manifest_counts is not None:
        summary["manifest_counts"] = manifest_counts
    return summary


def _print_summary(s: dict[str, Any]) -> None:
    """Print the summary; names and paths from the dataset are escaped (:func:`printable`)."""

    def out(line: str) -> None:
        print(printable(line))

    ratio = s["bytes_raw"] / s["bytes_compressed"] if s["bytes_compressed"] else 1.0
    out(f"dataset     {s['path']}")
    out(f"shards      {s['shards']}    samples {s['samples']}")
    out(
        f"bytes       raw {s['bytes_raw']:,}  compressed {s['bytes_compressed']:,} "
        f"({s['compression']}, x{ratio:.2f})  hashes {s['hashes']}"
    )
    out("columns     " + ", ".join(f"{k}:{v}" for k, v in s["columns"].items()))
    out("per source  " + ", ".join(f"{k}={v}" for k, v in s["per_source"].items()))
    for title, key in (
        ("text length (chars)", "text_chars_histogram"),
        ("token length", "token_length_histogram"),
    ):
        if key not in s:
            continue
        out(f"{title} histogram:")
        for src, bins in s[key].items():
            cells = "  ".join(
                f"[{b['lo']},{b['hi'] if b['hi'] < 1 << 60 else 'inf'}):{b['count']}" for b in bins
            )
            out(f"  {src:<14} {cells}")
    if "perplexity_histogram" in s:
        out("perplexity histogram:")
        for src, bins in s["perplexity_histogram"].items():
            cells = "  ".join(f"[{b['lo']:.0f},{b['hi']:.0f}):{b['count']}" for b in bins)
            out(f"  {src:<14} {cells}")


def _decode_tokens(root: Path, tokens: np.ndarray) -> str | None:
    """Decode token ids with the tokenizer recorded in the run's manifest, if loadable."""
    manifest = root.parent / "manifest.json"
    try:
        recorded = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no readable manifest: the ids are printed undecoded
    config = recorded.get("config") if isinstance(recorded, dict) else None
    stages = config.get("stages") if isinstance(config, dict) else None
    for stage in stages if isinstance(stages, list) else []:
        if isinstance(stage, dict) and stage.get("op") == "tokenize" and stage.get("tokenizer"):
            path = str(stage["tokenizer"])
            if "://" not in path and not Path(path).is_absolute():
                path = str(Path(str(config.get("base_dir", "."))) / path)
            try:
                from dataforge.tokenization.hf_tokenizer import load_tokenizer

                return load_tokenizer(path).decode([int(t) for t in tokens])
            except Exception as exc:  # noqa: BLE001 - inspect still prints the ids
                return f"<cannot decode: {exc}>"
    return None


@contextmanager
def local_dataset(location: str) -> Iterator[Path]:
    """A local directory for ``location``: itself, or for a URI a temporary copy of the MDS
    dataset (a run's ``manifest.json`` and ``mds/``, never ``_work/``), removed after.

    Raises:
        InspectError: the location holds no MDS index.
        StorageError: it cannot be reached.
    """
    from dataforge.io.fs import is_uri, scratch_dir
    from dataforge.rundir.store import RunStore

    if not is_uri(location):
        yield Path(location)
        return
    store = RunStore(location)
    if store.exists("index.json"):
        prefix = ""
    elif store.exists("mds/index.json"):
        prefix = "mds/"
    elif store.exists("manifest.json"):
        raise InspectError(f"{location}: run has no MDS index (failed, incomplete, or not MDS)")
    else:
        raise InspectError(f"{location}: no index.json here or in {location}/mds")
    scratch = scratch_dir("inspect")
    try:
        _download_dataset(store, prefix, scratch / prefix)
        if prefix:
            store.download("manifest.json", scratch / "manifest.json")
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # ours: a fresh scratch_dir made above


def _download_dataset(store: Any, prefix: str, dest: Path) -> None:
    """Fetch ``index.json``, check it, then only the shard files it names: an object key
    with ``..`` in it (S3 keys are plain strings) is never a local path here."""
    store.download(f"{prefix}index.json", dest / "index.json")
    for shard in read_index(dest)["shards"]:
        for key in ("zip_data", "raw_data"):
            info = shard.get(key)
            rel = f"{prefix}{info['basename']}" if info else None
            # A compressed shard's raw file is optional (streaming removes it).
            if rel and (key == "zip_data" or not shard.get("zip_data") or store.exists(rel)):
                store.download(rel, dest / info["basename"])


def _print_head(samples: list[dict[str, Any]]) -> None:
    """Print the first samples: a text keeps its lines and tabs; every other control
    character in it, and any in its id, source or lang, is shown escaped."""
    for i, record in enumerate(samples):
        text = str(record.get("text", ""))
        print(
            printable(
                f"--- sample {i}: id={record.get('id')} source={record.get('source')} "
                f"lang={record.get('lang')} chars={len(text)}"
            )
        )
        print(printable(text[:500], multiline=True) + (" ..." if len(text) > 500 else ""))
        if "tokens" in record:
            print(f"  tokens ({len(record['tokens'])}): {record['tokens'][:24]}...")
            if record.get("decoded") is not None:
                print(f"  decoded == text: {record['decoded'] == text}")


def inspect_path(path: Path, head: int = 0, verify: bool = False, as_json: bool = False) -> int:
    """Run ``dataforge inspect``. Returns the exit code (1 when --verify finds corruption).

    Every string from the dataset is printed escaped (:mod:`dataforge.text.terminal`).
    """
    root = dataset_dir(path)
    problems = verify_dataset(root) if verify else []
    if problems:  # a corrupt shard cannot be summarized; report what is wrong
        if as_json:
            print(
                printable_json(
                    {"path": str(root), "verify": {"ok": False, "problems": problems}}, indent=2
                )
            )
        for p in problems if not as_json else []:
            print(f"CORRUPT: {printable(p)}", file=sys.stderr)
        return 1
    summary = summarize(root)
    samples = []
    if head:
        for i, record in enumerate(iter_samples(root)):
            if i >= head:
                break
            if "tokens" in record:
                record["decoded"] = _decode_tokens(root, record["tokens"])
                record["tokens"] = record["tokens"].tolist()
            samples.append(record)
    if as_json:
        out = {**summary, "head": samples}
        if verify:
            out["verify"] = {"ok": True, "problems": []}
        print(printable_json(out, indent=2, default=str))
        return 0
    _print_summary(summary)
    _print_head(samples)
    if verify:
        print(f"verify      ok ({summary['shards']} shards, {summary['samples']} samples)")
    return 0
