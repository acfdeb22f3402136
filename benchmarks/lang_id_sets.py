"""Evaluation sets for ``lang_id`` built from real documents: short English sentences and
mixed zh/en documents with a known truth. Shared by ``benchmarks/lang_id.py`` (the printed
accuracy figures) and ``tests/ops/test_lang_id.py`` (the asserted floors), so both measure
the same sets."""

from __future__ import annotations

import random
import re

__all__ = ["english_sentences", "mixed_documents"]


def english_sentences(texts: list[str]) -> list[str]:
    """Sentences of 10-50 characters and at least three words from English documents."""
    out = []
    for text in texts:
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
            if 10 <= len(sentence) < 50 and sentence.count(" ") >= 2:
                out.append(sentence)
    return out


def mixed_documents(zh: list[str], en: list[str], n: int) -> tuple[list[str], list[str]]:
    """``n`` Chinese and English pieces spliced into one document each, with the language
    whose part carries clearly more (Han characters / 2 against Latin letters / 5, 1.5x
    apart); pieces too close to call are skipped. Seeded: the same sets every run."""
    rng = random.Random(14)
    docs, truth = [], []
    while len(docs) < n:
        zh_part = rng.choice(zh)[: rng.randrange(5, 300)]
        en_part = rng.choice(en)[: rng.randrange(5, 600)]
        han = len(re.findall(r"[\u4e00-\u9fff]", zh_part))
        latin = len(re.findall(r"[A-Za-z]", en_part))
        if han / 2 >= 1.5 * latin / 5:
            truth.append("zh")
        elif latin / 5 >= 1.5 * han / 2:
            truth.append("en")
        else:
            continue
        parts = [zh_part, en_part] if rng.random() < 0.5 else [en_part, zh_part]
        docs.append(rng.choice([" ", "\n", "，"]).join(parts))
    return docs, truth
