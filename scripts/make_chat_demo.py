"""Build small SFT and DPO demo sets in ``data/demo/chat/`` from the demo corpus.

Real text only, rearranged into chat records (deterministic: inputs sorted, no randomness):

* ``sft.jsonl``: reviews_zh -> "is this review positive or negative?" with the review's
  label as the answer (prompt/response + system); docs_en -> two-turn ``messages``
  conversations about a Python module (its summary, then more of its documentation).
* ``dpo.jsonl``: reviews_zh -> "write a positive/negative review", chosen = a review with
  that label; docs_en -> "what is module X for?", chosen = X's summary. The rejected answer
  is the chosen one corrupted (its characters / words shuffled, seeded by the record's id),
  so the preference (fluent over scrambled) holds for any response and no pair shares text
  with another. Reviews with the same text are used once.

A stable hash of each record's id (crc32, one in ``HELD_OUT_EVERY``) sends it to
``sft_heldout.jsonl`` / ``dpo_heldout.jsonl`` instead: the held-out sets the tiny SFT and
DPO configs evaluate on (``eval:``).

Every record has ``id`` and ``prompt`` (the reader's ``text_key``), plus ``response`` /
``system`` / ``messages`` (SFT) or ``chosen`` / ``rejected`` (DPO) for ``meta_keys``.

Usage: ``python scripts/make_chat_demo.py --demo data/demo --out data/demo/chat [--reviews 4000]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import zlib
from pathlib import Path

HELD_OUT_EVERY = 10
REVIEW_SYSTEM = "你是商品评论分析助手。"
LABEL_ZH = {"pos": "正面", "neg": "负面"}


def read_reviews(demo: Path) -> dict[str, list[dict]]:
    by_label: dict[str, list[dict]] = {"pos": [], "neg": []}
    for path in sorted((demo / "reviews_zh").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record.get("label") in by_label and len(record["text"]) >= 10:
                    by_label[record["label"]].append(record)
    return by_label


def read_modules(demo: Path) -> list[tuple[str, str, str]]:
    """(module name, summary paragraph, the next part of its documentation)."""
    modules = []
    for path in sorted((demo / "docs_en").glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            record = json.loads(line)
            paragraphs = [p.strip() for p in record["text"].split("\n\n") if p.strip()]
            # A prose summary (some modules start with a signature instead of a docstring).
            if (
                len(paragraphs) >= 3
                and len(paragraphs[1].split()) >= 5
                and not paragraphs[1].endswith(")")
            ):
                modules.append((paragraphs[0], paragraphs[1], "\n\n".join(paragraphs[2:])[:1500]))
    return modules


def sft_records(reviews: dict[str, list[dict]], modules: list, limit: int) -> list[dict]:
    out = []
    for label in ("pos", "neg"):
        for r in reviews[label][: limit // 2]:
            prompt = f"判断下面这条商品评论是正面还是负面：\n{r['text']}"
            out.append(
                {
                    "id": f"sft:{r['id']}",
                    "prompt": prompt,
                    "response": LABEL_ZH[label],
                    "system": REVIEW_SYSTEM,
                }
            )
    for name, summary, more in modules:
        question = f"What is the Python module `{name}` for?"
        messages = [
            {"role": "user", "content": question},
            {"role": "assistant", "content": summary},
            {"role": "user", "content": "Show me more of its documentation."},
            {"role": "assistant", "content": more},
        ]
        out.append({"id": f"sft:pydoc:{name}", "prompt": question, "messages": messages})
    return out


def held_out(record_id: str) -> bool:
    """Whether a record goes to the held-out set: a stable hash of its id, not its position."""
    return zlib.crc32(record_id.encode("utf-8")) % HELD_OUT_EVERY == 0


def scramble(text: str, record_id: str) -> str:
    """``text`` with its words (or, without spaces, its characters) shuffled, seeded by the id."""
    words = text.split()
    parts, sep = (words, " ") if len(words) > 1 else (list(text), "")
    rng = random.Random(zlib.crc32(record_id.encode("utf-8")))
    for _ in range(10):
        rng.shuffle(parts)
        if sep.join(parts) != text:
            break
    return sep.join(parts)


def dpo_records(reviews: dict[str, list[dict]], modules: list, limit: int) -> list[dict]:
    out, seen = [], set()
    for want in ("pos", "neg"):
        for r in reviews[want][: limit // 2]:
            if r["text"] in seen:
                continue
            seen.add(r["text"])
            record_id = f"dpo:review:{r['id']}"
            out.append(
                {
                    "id": record_id,
                    "prompt": f"写一条{LABEL_ZH[want]}的商品评论。",
                    "chosen": r["text"],
                    "rejected": scramble(r["text"], record_id),
                }
            )
    for name, summary, _ in modules:
        record_id = f"dpo:pydoc:{name}"
        rejected = scramble(summary, record_id)
        if rejected == summary:
            continue
        out.append(
            {
                "id": record_id,
                "prompt": f"What is the Python module `{name}` for?",
                "chosen": summary,
                "rejected": rejected,
            }
        )
    return out


def write_jsonl(path: Path, records: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    tmp.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--demo", type=Path, default=Path("data/demo"))
    parser.add_argument("--out", type=Path, default=Path("data/demo/chat"))
    parser.add_argument(
        "--reviews", type=int, default=4000, help="reviews used per set (half each label)"
    )
    args = parser.parse_args()
    reviews, modules = read_reviews(args.demo), read_modules(args.demo)
    args.out.mkdir(parents=True, exist_ok=True)
    sft, dpo = (
        sft_records(reviews, modules, args.reviews),
        dpo_records(reviews, modules, args.reviews),
    )
    counts = {}
    for name, records in (("sft", sft), ("dpo", dpo)):
        held = [r for r in records if held_out(r["id"])]
        kept = [r for r in records if not held_out(r["id"])]
        write_jsonl(args.out / f"{name}.jsonl", kept)
        write_jsonl(args.out / f"{name}_heldout.jsonl", held)
        counts |= {name: len(kept), f"{name}_heldout": len(held)}
    (args.out / ".done").write_text(json.dumps(counts) + "\n")
    print(f"{args.out}: " + ", ".join(f"{k} {v} records" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
