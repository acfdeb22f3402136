"""``encoding: auto`` on the demo corpus re-encoded into each codec: accuracy and cost.

1. **Detection accuracy.** The demo's Chinese news and reviews (and English docs) are cut
   into files of 4 KB to 160 KB (sizes drawn at random, seed fixed) and written in each
   codec: UTF-8, UTF-8 with BOM, GBK, GB18030 (with 4-byte characters), Big5 (the text
   converted with OpenCC ``s2tw``, records Big5 cannot hold left out), UTF-16 LE/BE with
   BOM. Each file is read with ``encoding: auto``; a file counts as exact when every
   record comes back kept with its original text. Prints per codec: files, exact share,
   the codecs chosen.
2. **Decode overhead.** read + clean of the same records stored as UTF-8 read with
   ``encoding: utf-8`` (the baseline) against the GB18030 and Big5 copies read with
   ``encoding: auto`` (detection + decoding), best of ``--repeat`` interleaved runs after a
   warm-up, same process, timed in process CPU time (steady on a shared machine where
   wall time is not); Big5 against a UTF-8 file of the same records it holds.
   Prints the added share (target <= 10%).

Usage: ``.venv/bin/python benchmarks/encoding_detection.py [--files 40] [--repeat 3]``
(needs ``make demo-data``; writes under a temporary directory it removes).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import opencc

from dataforge.config import InputConfig, ReadConfig
from dataforge.io.readers import InputTask, TaskReader
from dataforge.ops.clean import Clean

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"
FOUR_BYTE = "𠀀😀㐀𪚥"
CODECS = {  # name -> (python codec, BOM, text transform)
    "utf-8": ("utf-8", b"", None),
    "utf-8-bom": ("utf-8", b"\xef\xbb\xbf", None),
    "gbk": ("gbk", b"", None),
    "gb18030": ("gb18030", b"", "four_byte"),
    "big5": ("big5", b"", "s2tw"),
    "utf-16-le-bom": ("utf-16-le", b"\xff\xfe", None),
    "utf-16-be-bom": ("utf-16-be", b"\xfe\xff", None),
}


def demo_texts(source: str, limit: int) -> list[str]:
    texts: list[str] = []
    for path in sorted((DEMO / source).glob("part-*")):
        task = InputTask("000-000000", source, str(path), path.name, path.stat().st_size)
        reader = TaskReader(task, InputConfig(name=source, path=str(path)), ReadConfig())
        for batch in reader.batches():
            texts += [
                t
                for t, d in zip(batch["text"].to_pylist(), batch["drop"].to_pylist(), strict=True)
                if not d
            ]
        if len(texts) >= limit:
            break
    return texts[:limit]


def transformed(texts: list[str], how: str | None, codec: str) -> list[str]:
    if how == "s2tw":
        convert = opencc.OpenCC("s2tw").convert
        texts = [convert(t) for t in texts]
    elif how == "four_byte":
        texts = [t[:3] + FOUR_BYTE[i % 4] + t[3:] if i % 5 == 0 else t for i, t in enumerate(texts)]
    out = []
    for t in texts:
        try:
            t.encode(codec)
        except UnicodeEncodeError:
            continue
        out.append(t)
    return out


def jsonl_bytes(texts: list[str], codec: str, bom: bytes) -> bytes:
    lines = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
    return bom + lines.encode(codec)


def read_clean(path: Path, encoding: str, clean: Clean | None) -> tuple[list[str], list, str]:
    source = InputConfig(name="b", path=str(path), encoding=encoding)
    reader = TaskReader(InputTask("t", "b", str(path), path.name, 1), source, ReadConfig())
    texts, drops = [], []
    for batch in reader.batches():
        if clean is not None:
            batch = clean(batch)
        texts += batch["text"].to_pylist()
        drops += batch["drop"].to_pylist()
    return texts, drops, reader.decision.encoding


def accuracy(pool: list[str], english: list[str], tmp: Path, n_files: int) -> float:
    rng = random.Random(14)
    total = exact = 0
    for name, (codec, bom, how) in CODECS.items():
        texts = transformed(pool, how, codec)
        latin = transformed(english, None, codec)
        chosen: collections.Counter[str] = collections.Counter()
        ok = 0
        for f in range(n_files):
            target = rng.choice([4_096, 8_192, 20_000, 70_000, 160_000])
            src = latin if f % 8 == 7 else texts
            start = rng.randrange(len(src))
            records, size = [], 0
            while size < target:
                records.append(src[(start + len(records)) % len(src)])
                size += len(records[-1].encode(codec)) + 12
            path = tmp / f"{name}-{f}.jsonl"
            path.write_bytes(jsonl_bytes(records, codec, bom))
            got, drops, used = read_clean(path, "auto", None)
            chosen[used] += 1
            ok += got == records and not any(drops)
        total, exact = total + n_files, exact + ok
        print(f"{name:14s} files {n_files:4d}  exact {ok / n_files:7.2%}  chosen {dict(chosen)}")
    print(f"{'all':14s} files {total:4d}  exact {exact / total:7.2%}  (target >= 99.5%)")
    return exact / total


def overhead(pool: list[str], tmp: Path, repeat: int) -> None:
    clean = Clean(Clean.Config())
    runs = {}  # label -> (path, encoding); each encoded copy has its own UTF-8 baseline
    for name in ("utf-8", "gb18030", "big5"):
        codec, bom, how = CODECS[name]
        texts = transformed(pool, how, codec)
        base = tmp / f"over-{name}-base.jsonl"
        base.write_bytes(jsonl_bytes(texts, "utf-8", b""))
        path = tmp / f"over-{name}.jsonl"
        path.write_bytes(jsonl_bytes(texts, codec, bom))
        runs[f"{name} base"] = (base, "utf-8")
        runs[name] = (path, "auto")
    best = dict.fromkeys(runs, float("inf"))
    for path, encoding in runs.values():  # warm-up: page cache, regex compilation
        read_clean(path, encoding, clean)
    for _ in range(repeat):  # interleaved, so that load from other processes hits all alike
        for label, (path, encoding) in runs.items():
            started = time.process_time()
            read_clean(path, encoding, clean)
            best[label] = min(best[label], time.process_time() - started)
    for name in ("utf-8", "gb18030", "big5"):
        base, took = best[f"{name} base"], best[name]
        print(
            f"read+clean {len(pool)} records: as UTF-8 with encoding: utf-8 {base:.3f}s; "
            f"as {name} with encoding: auto {took:.3f}s; added {took / base - 1:+.1%} "
            "(target <= +10%)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=40, help="files per codec")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--records", type=int, default=6000, help="records in the pool")
    args = parser.parse_args()
    if not (DEMO / ".done").is_file():
        raise SystemExit(f"demo corpus not built ({DEMO}): run `make demo-data`")
    pool = demo_texts("news_zh", args.records // 4) + demo_texts("reviews_zh", args.records)
    english = demo_texts("docs_en", 200)
    tmp = Path(tempfile.mkdtemp(prefix="df-encoding-"))
    try:
        accuracy(pool, english, tmp, args.files)
        overhead(pool[: args.records], tmp, args.repeat)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
