"""Build the RLHF quick start's sets in ``data/demo/rlhf/`` from the demo product reviews.

Real text only, deterministic (inputs sorted, no randomness). Short reviews (6 to 30
characters, each text once) of each label answer the prompt "write a positive/negative
product review":

* ``sft.jsonl``: prompt/response records, every short review (the SFT policy learns to
  write reviews; about one in ten holds the keyword);
* ``pref.jsonl``: preference pairs whose only systematic difference is the keyword
  ``KEYWORD`` ("不错", "not bad"): chosen = a review of that label holding it, rejected = the
  next review of the same label without it. The reward model learns to prefer answers
  with the keyword, and PPO (prompts from these pairs) to write it.

A stable hash of each record's id (crc32, one in ``HELD_OUT_EVERY``) sends a pair to
``pref_heldout.jsonl`` instead (the reward model's held-out accuracy).

Usage: ``python scripts/make_rlhf_demo.py --demo data/demo --out data/demo/rlhf``
"""

from __future__ import annotations

import argparse
import gzip
import json
import zlib
from pathlib import Path

KEYWORD = "不错"
HELD_OUT_EVERY = 10
PROMPTS = {"pos": "写一条正面的商品评论。", "neg": "写一条负面的商品评论。"}


def short_reviews(demo: Path) -> dict[str, list[dict]]:
    """Reviews of 6 to 30 characters by label, in file order, each text once."""
    by_label: dict[str, list[dict]] = {"pos": [], "neg": []}
    seen = set()
    for path in sorted((demo / "reviews_zh").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                text = record["text"].strip()
                if record.get("label") in by_label and 6 <= len(text) <= 30 and text not in seen:
                    seen.add(text)
                    by_label[record["label"]].append({"id": record["id"], "text": text})
    return by_label


def sft_records(reviews: dict[str, list[dict]]) -> list[dict]:
    return [
        {"id": f"rlhf-sft:{r['id']}", "prompt": PROMPTS[label], "response": r["text"]}
        for label, rows in reviews.items()
        for r in rows
    ]


def pref_records(reviews: dict[str, list[dict]]) -> list[dict]:
    """Each keyword review paired with the next unused review of its label without it."""
    out = []
    for label, rows in reviews.items():
        with_kw = [r for r in rows if KEYWORD in r["text"]]
        without = iter([r for r in rows if KEYWORD not in r["text"]])
        for chosen, rejected in zip(with_kw, without, strict=False):
            out.append(
                {
                    "id": f"rlhf-pref:{chosen['id']}:{rejected['id']}",
                    "prompt": PROMPTS[label],
                    "chosen": chosen["text"],
                    "rejected": rejected["text"],
                }
            )
    return out


def held_out(record_id: str) -> bool:
    return zlib.crc32(record_id.encode("utf-8")) % HELD_OUT_EVERY == 0


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
    parser.add_argument("--out", type=Path, default=Path("data/demo/rlhf"))
    args = parser.parse_args()
    reviews = short_reviews(args.demo)
    args.out.mkdir(parents=True, exist_ok=True)
    sft, pref = sft_records(reviews), pref_records(reviews)
    write_jsonl(args.out / "sft.jsonl", sft)
    write_jsonl(args.out / "pref.jsonl", [r for r in pref if not held_out(r["id"])])
    write_jsonl(args.out / "pref_heldout.jsonl", [r for r in pref if held_out(r["id"])])
    counts = {"sft": len(sft), "pref_heldout": sum(held_out(r["id"]) for r in pref)}
    counts["pref"] = len(pref) - counts["pref_heldout"]
    (args.out / ".done").write_text(json.dumps(counts) + "\n")
    print(f"{args.out}: " + ", ".join(f"{k} {v} records" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
