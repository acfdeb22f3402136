"""Precision and recall of ``decontaminate`` on a labeled set built from the demo corpus.

Evaluation items: long paragraphs of People's Daily articles (zh) and long sentences of the
Python documentation (en). Contaminated documents: other documents with a 60-character (zh)
or 15-word (en) passage of an item inserted, perturbed the way copies differ: traditional
script (OpenCC s2t), full-width punctuation, extra spaces and a line break. Clean documents:
other documents as they are (same newspaper, same documentation: they share the register
and stock phrases of the items), and hard negatives holding three short fragments of items
(at most 12 characters / 6 words each). Each setting is run as the op runs (setup, prepare,
apply); P/R count a dropped document as a positive. Labels are by construction: a clean
English document that shares a whole docstring with an item (the documentation repeats
some across modules) counts as a false positive, and a 15-piece passage of ASCII art or
``>>>`` prompts that holds fewer than 13 words as a miss.

    .venv/bin/python benchmarks/decontam_quality.py [--items 150] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataforge.io.documents import iter_documents  # noqa: E402
from dataforge.ops.base import OpContext  # noqa: E402
from dataforge.ops.decontaminate import Decontaminate  # noqa: E402
from dataforge.records import DROP  # noqa: E402
from dataforge.typed_config import from_mapping  # noqa: E402

FULLWIDTH = str.maketrans({",": "，", ".": "。", "?": "？", "!": "！", ":": "：", ";": "；"})


def texts(pattern: str, limit: int) -> list[str]:
    out: list[str] = []
    for batch in iter_documents(str(ROOT / pattern), source="d"):
        out += batch.column("text").to_pylist()
        if len(out) >= limit:
            break
    return out[:limit]


def perturb(passage: str, lang: str, rng: random.Random) -> str:
    if lang == "zh":
        import opencc

        passage = opencc.OpenCC("s2t").convert(passage).translate(FULLWIDTH)
        cut = rng.randrange(10, len(passage) - 10)
        return passage[:cut] + "  \n" + passage[cut:]
    words = passage.translate(FULLWIDTH).split()
    cut = rng.randrange(3, len(words) - 3)
    return " ".join(words[:cut]) + " \n\t " + "  ".join(words[cut:]).upper()


def build(lang: str, n_items: int, rng: random.Random) -> tuple[list[str], list[tuple[str, bool]]]:
    if lang == "zh":
        docs = texts("data/demo/news_zh/*.jsonl.zst", 6 * n_items)
        units = [p for d in docs[: n_items * 2] for p in d.split("\n") if len(p) >= 80]
    else:
        docs = texts("data/demo/docs_en/*.jsonl", 358)
        sentences = [s for d in docs[:150] for s in d.replace("\n", " ").split(". ")]
        units = [s for s in sentences if len(s.split()) >= 20]
    items = rng.sample(units, min(n_items, len(units)))
    rest = docs[n_items * 2 :] if lang == "zh" else docs[150:]
    labeled: list[tuple[str, bool]] = []
    for i, doc in enumerate(rest):
        item = rng.choice(items)
        if i % 3 == 0:  # contaminated
            if lang == "zh":
                start = rng.randrange(0, len(item) - 60 + 1)
                passage = item[start : start + 60]
            else:
                words = item.split()
                start = rng.randrange(0, len(words) - 15 + 1)
                passage = " ".join(words[start : start + 15])
            labeled.append((_insert(doc, perturb(passage, lang, rng), rng), True))
        elif i % 3 == 1:  # hard negative: short fragments of items
            for _ in range(3):
                frag_item = rng.choice(items)
                if lang == "zh":
                    s = rng.randrange(0, len(frag_item) - 12)
                    frag = frag_item[s : s + 12]
                else:
                    w = frag_item.split()
                    s = rng.randrange(0, len(w) - 6)
                    frag = " ".join(w[s : s + 6])
                doc = _insert(doc, frag, rng)
            labeled.append((doc, False))
        else:
            labeled.append((doc, False))
    return items, labeled


def _insert(doc: str, passage: str, rng: random.Random) -> str:
    lines = doc.split("\n")
    at = rng.randrange(len(lines) + 1)
    return "\n".join(lines[:at] + [passage] + lines[at:])


def score(items: list[str], labeled: list[tuple[str, bool]], params: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "eval.jsonl"
        path.write_text("".join(json.dumps({"q": q}, ensure_ascii=False) + "\n" for q in items))
        raw = {"eval_sets": [{"path": str(path), "fields": ["q"]}], **params}
        op = Decontaminate(from_mapping(Decontaminate.Config, raw, "bench"), OpContext())
        op.setup()
        n = len(labeled)
        table = pa.table({
            "id": [str(i) for i in range(n)], "source": ["s"] * n,
            "text": [t for t, _ in labeled], DROP: pa.nulls(n, pa.string()),
        })  # fmt: skip
        dropped = [d is not None for d in op.apply(op.prepare(table), None)[DROP].to_pylist()]
    truth = [c for _, c in labeled]
    tp = sum(d and t for d, t in zip(dropped, truth, strict=True))
    fp = sum(d and not t for d, t in zip(dropped, truth, strict=True))
    fn = sum(t and not d for d, t in zip(dropped, truth, strict=True))
    return {
        "docs": n,
        "contaminated": sum(truth),
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "false_positives": fp,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    settings = {
        "zh": [{"char_ngram": n} for n in (13, 25, 50)],
        "en": [{"word_ngram": n} for n in (8, 13, 20)],
    }
    print(f"{'lang':4} {'setting':16} {'docs':>5} {'contam':>6} {'P':>6} {'R':>6} {'FP':>4}")
    for lang, grid in settings.items():
        items, labeled = build(lang, args.items, random.Random(args.seed))
        for params in grid:
            r = score(items, labeled, params)
            key, value = next(iter(params.items()))
            print(
                f"{lang:4} {key + '=' + str(value):16} {r['docs']:5d} {r['contaminated']:6d} "
                f"{r['precision']:6.3f} {r['recall']:6.3f} {r['false_positives']:4d}"
            )


if __name__ == "__main__":
    main()
