"""Decontamination throughput on English text: ``decontaminate`` vs datatrove's n-gram loop.

datatrove 0.10.1's ``NGramsDecontFilter`` tokenizes with NLTK's ``word_tokenize``, which
needs the ``punkt_tab`` data (a download, not a package), and its indexer takes tasks from
lighteval; neither runs offline. The baseline is therefore its ``filter`` loop as written
there, run here in-process with the tokenizer replaced by ``str.lower().split()`` (cheaper
than NLTK, so datatrove itself would be slower): every 13-gram joined with spaces, hashed
with xxhash64 and looked up in a dict of the evaluation hashes, stopping at the first hit.
Ours: ``Decontaminate.prepare`` + ``apply`` on record batches (NFKC, punctuation-free words,
rolling hashes, every match located for the audit). Same documents (the demo's Python
documentation, repeated to ``--docs``), same evaluation items (sentences of it), one core,
best-of-N CPU seconds; both decide the same documents (checked).

    .venv/bin/python benchmarks/decontam_throughput.py [--docs 4000] [--items 500]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import xxhash

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataforge.io.documents import iter_documents  # noqa: E402
from dataforge.ops.base import OpContext  # noqa: E402
from dataforge.ops.decontaminate import Decontaminate  # noqa: E402
from dataforge.records import DROP  # noqa: E402
from dataforge.typed_config import from_mapping  # noqa: E402

N = 13


def best(fn, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        start = time.process_time()
        result = fn()
        times.append(time.process_time() - start)
    return min(times), result


def datatrove_loop(docs: list[str], index: dict[int, str]) -> list[bool]:
    """datatrove's NGramsDecontFilter.filter, whitespace tokens instead of NLTK."""
    dropped = []
    for text in docs:
        tokens = text.lower().split()
        hit = False
        for i in range(len(tokens) - N + 1):
            if xxhash.xxh64_intdigest(" ".join(tokens[i : i + N])) in index:
                hit = True
                break
        dropped.append(hit)
    return dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=4000)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    base: list[str] = []
    for batch in iter_documents(str(ROOT / "data/demo/docs_en/*.jsonl"), source="d"):
        base += batch.column("text").to_pylist()
    rng = random.Random(0)
    # items: plain-word sentences, so that both tokenizations agree on them
    sentences = [s for d in base for s in d.replace("\n", " ").split(". ")]
    plain = [s for s in sentences if len(s.split()) >= 20 and all(w.isalpha() for w in s.split())]
    items = rng.sample(plain, min(args.items, len(plain)))
    docs = (base * (args.docs // len(base) + 1))[: args.docs]
    index = {}
    for item in items:
        tokens = item.lower().split()
        for i in range(len(tokens) - N + 1):
            index[xxhash.xxh64_intdigest(" ".join(tokens[i : i + N]))] = "eval"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "eval.jsonl"
        path.write_text("".join(json.dumps({"q": q}) + "\n" for q in items), encoding="utf-8")
        raw = {"eval_sets": [{"path": str(path), "fields": ["q"]}], "word_ngram": N}
        op = Decontaminate(from_mapping(Decontaminate.Config, raw, "bench"), OpContext())
        op.setup()
    n = len(docs)
    table = pa.table({
        "id": [str(i) for i in range(n)], "source": ["s"] * n, "text": docs,
        DROP: pa.nulls(n, pa.string()),
    })  # fmt: skip

    def ours() -> list[bool]:
        out = []
        for offset in range(0, n, args.batch):
            part = table.slice(offset, args.batch)
            out += [d is not None for d in op.apply(op.prepare(part), None)[DROP].to_pylist()]
        return out

    t_peer, peer = best(lambda: datatrove_loop(docs, index), args.rounds)
    t_ours, mine = best(ours, args.rounds)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    same = sum(a == b for a, b in zip(peer, mine, strict=True))
    print(
        f"en: {n} docs, {mb:.1f} MB, {len(items)} items | datatrove loop {mb / t_peer:.1f} MB/s"
        f" | decontaminate {mb / t_ours:.1f} MB/s | speed ratio {t_peer / t_ours:.2f}x | "
        f"dropped {sum(mine)} vs {sum(peer)}, same decision on {same}/{n}"
    )


if __name__ == "__main__":
    main()
