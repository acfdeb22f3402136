"""``dataforge inspect``: summarize, print and verify MDS datasets without streaming's
shared-memory machinery (shards are read and decoded directly).

An index whose shard paths escape the dataset directory, or that declares a ``pkl``
column (unpickling runs code), is refused before any shard is opened.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import xxhash
import zstandard

__all__ = [
    "InspectError",
    "inspect_path",
    "iter_samples",
    "load_index",
    "local_dataset",
    "verify_dataset",
]

HIST_EDGES = [0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536, 1 << 62]


class InspectError(ValueError):
    """PATH is not a readable, safe MDS dataset."""


def _dataset_dir(path: Path) -> Path:
    if (path / "index.json").exists():
        return path
    if (path / "mds" / "index.json").exists():
        return path / "mds"
    if (path / "manifest.json").exists():
        raise InspectError(f"{path}: run has no MDS index (failed, incomplete, or not MDS output)")
    raise InspectError(f"{path}: no index.json here or in {path / 'mds'}")


def load_index(root: Path) -> dict[str, Any]:
    """Read and sanity-check ``root/index.json``."""
    try:
        index = json.loads((root / "index.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InspectError(f"{root / 'index.json'}: unreadable index ({exc})") from exc
    for i, shard in enumerate(index.get("shards", [])):
        if shard.get("format") != "mds":
            raise InspectError(
                f"shard {i}: format {shard.get('format')!r} is not supported (only mds)"
            )
        if "pkl" in shard.get("column_encodings", []):
            raise InspectError(
                f"shard {i}: refusing a pkl column (unpickling can run arbitrary code)"
            )
        for key in ("raw_data", "zip_data"):
            info = shard.get(key)
            if info:
                rel = PurePosixPath(info["basename"])
                if rel.is_absolute() or ".." in rel.parts:
                    raise InspectError(
                        f"shard {i}: path {info['basename']!r} escapes the dataset directory"
                    )
    return index


def _shard_bytes(root: Path, shard: dict[str, Any]) -> bytes:
    if shard.get("zip_data"):
        data = (root / shard["zip_data"]["basename"]).read_bytes()
        if shard.get("compression", "").split(":")[0] != "zstd":
            raise InspectError(f"compression {shard['compression']!r} is not supported by inspect")
        return zstandard.ZstdDecompressor().decompress(
            data, max_output_size=shard["raw_data"]["bytes"]
        )
    return (root / shard["raw_data"]["basename"]).read_bytes()


def _decode(encoding: str, data: bytes) -> Any:
    if encoding == "str":
        return data.decode("utf-8")
    if encoding == "json":
        return json.loads(data.decode("utf-8"))
    if encoding.startswith("ndarray"):
        # MDS ndarray payloads carry a dtype/shape header unless the encoding fixes both.
        from streaming.base.format.mds.encodings import mds_decode

        return mds_decode(encoding, data)
    if encoding in ("int", "int64"):
        return int(np.frombuffer(data, np.int64)[0])
    if encoding in ("float64",):
        return float(np.frombuffer(data, np.float64)[0])
    if encoding in ("int32", "uint16", "uint32", "uint64", "int16", "uint8", "int8", "float32"):
        return np.frombuffer(data, np.dtype(encoding))[0].item()
    if encoding == "bytes":
        return data
    raise InspectError(f"column encoding {encoding!r} is not supported by inspect")


def _shard_samples(raw: bytes, shard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    n = int(np.frombuffer(raw, np.uint32, 1, 0)[0])
    offsets = np.frombuffer(raw, np.uint32, n + 1, 4)
    names, encodings, sizes = (
        shard["column_names"],
        shard["column_encodings"],
        shard["column_sizes"],
    )
    n_var = sum(1 for s in sizes if s is None)
    for i in range(n):
        sample = raw[offsets[i] : offsets[i + 1]]
        var_sizes = iter(np.frombuffer(sample, np.uint32, n_var, 0).tolist())
        pos = 4 * n_var
        record = {}
        for name, enc, size in zip(names, encodings, sizes, strict=True):
            length = next(var_sizes) if size is None else size
            record[name] = _decode(enc, sample[pos : pos + length])
            pos += length
        yield record


def iter_samples(path: Path) -> Iterator[dict[str, Any]]:
    """Every sample of the dataset at ``path`` (run dir or MDS dir), in order."""
    root = _dataset_dir(path)
    for shard in load_index(root)["shards"]:
        yield from _shard_samples(_shard_bytes(root, shard), shard)


def _hash(algo: str, data: bytes) -> str:
    if algo == "xxh64":
        return xxhash.xxh64_hexdigest(data)
    if algo == "xxh3_64":
        return xxhash.xxh3_64_hexdigest(data)
    if algo in hashlib.algorithms_available:
        return hashlib.new(algo, data).hexdigest()
    raise InspectError(f"hash {algo!r} is not supported")


def verify_dataset(path: Path) -> list[str]:
    """Check every shard's size, recorded hashes and sample count. Returns the problems."""
    root = _dataset_dir(path)
    problems = []
    for i, shard in enumerate(load_index(root)["shards"]):
        for key in ("zip_data", "raw_data"):
            info = shard.get(key)
            if not info or (
                key == "raw_data"
                and shard.get("zip_data")
                and not (root / info["basename"]).exists()
            ):
                continue
            file = root / info["basename"]
            if not file.exists():
                problems.append(f"shard {i}: missing file {info['basename']}")
                continue
            data = file.read_bytes()
            if len(data) != info["bytes"]:
                problems.append(
                    f"shard {i}: {info['basename']} has {len(data)} bytes, index says {info['bytes']}"
                )
            for algo, expected in (info.get("hashes") or {}).items():
                if _hash(algo, data) != expected:
                    problems.append(f"shard {i}: {info['basename']} {algo} mismatch")
        if any(p.startswith(f"shard {i}:") for p in problems):
            continue
        try:
            raw = _shard_bytes(root, shard)
            count = sum(1 for _ in _shard_samples(raw, shard))
        except Exception as exc:  # noqa: BLE001 - any decode failure is corruption to report
            problems.append(f"shard {i}: cannot decode ({type(exc).__name__}: {exc})")
            continue
        if count != shard["samples"]:
            problems.append(f"shard {i}: {count} samples, index says {shard['samples']}")
    return problems


def _histogram(values: list[int]) -> list[dict[str, int]]:
    counts, _ = np.histogram(np.asarray(values, dtype=np.int64), bins=HIST_EDGES)
    return [
        {"lo": lo, "hi": hi, "count": int(c)}
        for lo, hi, c in zip(HIST_EDGES[:-1], HIST_EDGES[1:], counts, strict=True)
        if c
    ]


def summarize(path: Path) -> dict[str, Any]:
    root = _dataset_dir(path)
    index = load_index(root)
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
    manifest = root.parent / "manifest.json"
    if manifest.exists():
        summary["manifest_counts"] = (
            json.loads(manifest.read_text()).get("counts", {}).get("by_source")
        )
    return summary


def _print_summary(s: dict[str, Any]) -> None:
    ratio = s["bytes_raw"] / s["bytes_compressed"] if s["bytes_compressed"] else 1.0
    print(f"dataset     {s['path']}")
    print(f"shards      {s['shards']}    samples {s['samples']}")
    print(
        f"bytes       raw {s['bytes_raw']:,}  compressed {s['bytes_compressed']:,} "
        f"({s['compression']}, x{ratio:.2f})  hashes {s['hashes']}"
    )
    print("columns     " + ", ".join(f"{k}:{v}" for k, v in s["columns"].items()))
    print("per source  " + ", ".join(f"{k}={v}" for k, v in s["per_source"].items()))
    for title, key in (
        ("text length (chars)", "text_chars_histogram"),
        ("token length", "token_length_histogram"),
    ):
        if key not in s:
            continue
        print(f"{title} histogram:")
        for src, bins in s[key].items():
            cells = "  ".join(
                f"[{b['lo']},{b['hi'] if b['hi'] < 1 << 60 else 'inf'}):{b['count']}" for b in bins
            )
            print(f"  {src:<14} {cells}")
    if "perplexity_histogram" in s:
        print("perplexity histogram:")
        for src, bins in s["perplexity_histogram"].items():
            cells = "  ".join(f"[{b['lo']:.0f},{b['hi']:.0f}):{b['count']}" for b in bins)
            print(f"  {src:<14} {cells}")


def _decode_tokens(root: Path, tokens: np.ndarray) -> str | None:
    """Decode token ids with the tokenizer recorded in the run's manifest, if loadable."""
    manifest = root.parent / "manifest.json"
    if not manifest.exists():
        return None
    config = json.loads(manifest.read_text()).get("config", {})
    for stage in config.get("stages", []):
        if stage.get("op") == "tokenize" and stage.get("tokenizer"):
            path = stage["tokenizer"]
            if "://" not in path and not Path(path).is_absolute():
                path = str(Path(config.get("base_dir", ".")) / path)
            try:
                from dataforge.io.fs import fetch_to_cache
                from dataforge.tokenization import Tokenizer

                return Tokenizer.load(fetch_to_cache(path)).decode([int(t) for t in tokens])
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
    from dataforge.io.run_store import RunStore

    if not is_uri(location):
        yield Path(location)
        return
    store = RunStore(location)
    if store.exists("index.json"):
        wanted = [""]
    elif store.exists("mds/index.json"):
        wanted = ["mds", "manifest.json"]
    elif store.exists("manifest.json"):
        raise InspectError(f"{location}: run has no MDS index (failed, incomplete, or not MDS)")
    else:
        raise InspectError(f"{location}: no index.json here or in {location}/mds")
    scratch = scratch_dir("inspect")
    try:
        for rel in wanted:
            store.download(rel, scratch / rel if rel else scratch)
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def inspect_path(path: Path, head: int = 0, verify: bool = False, as_json: bool = False) -> int:
    """Run ``dataforge inspect``. Returns the exit code (1 when --verify finds corruption)."""
    root = _dataset_dir(path)
    problems = verify_dataset(root) if verify else []
    if problems:  # a corrupt shard cannot be summarized; report what is wrong
        if as_json:
            print(
                json.dumps(
                    {"path": str(root), "verify": {"ok": False, "problems": problems}}, indent=2
                )
            )
        for p in problems if not as_json else []:
            print(f"CORRUPT: {p}", file=sys.stderr)
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
            out["verify"] = {"ok": not problems, "problems": problems}
        print(json.dumps(out, ensure_ascii=False, indent=2, default=str))
    else:
        _print_summary(summary)
        for i, record in enumerate(samples):
            text = record.get("text", "")
            print(
                f"--- sample {i}: id={record.get('id')} source={record.get('source')} "
                f"lang={record.get('lang')} chars={len(text)}"
            )
            print(text[:500] + (" ..." if len(text) > 500 else ""))
            if "tokens" in record:
                print(f"  tokens ({len(record['tokens'])}): {record['tokens'][:24]}...")
                if record.get("decoded") is not None:
                    same = record["decoded"] == text
                    print(f"  decoded == text: {same}")
        if verify:
            if problems:
                for p in problems:
                    print(f"CORRUPT: {p}", file=sys.stderr)
            else:
                print(f"verify      ok ({summary['shards']} shards, {summary['samples']} samples)")
    return 1 if problems else 0
