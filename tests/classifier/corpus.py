"""Clean documentation text against corrupted text: the classifier's labeled corpus.

Positives are demo-corpus documents cut into chunks of whole lines; negatives are other
chunks with the words of each line shuffled (characters in pairs for Chinese), mixed with
boilerplate and spam-like lines. Deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

BOILERPLATE = {
    "en": [
        "Copyright 2024 All rights reserved.",
        "Click here to subscribe to our newsletter",
        "Home | About | Contact | Privacy Policy | Terms of Use",
        "Share on Facebook Share on Twitter",
        "Cookies help us deliver our services. Accept",
    ],
    "zh": [
        "版权所有 © 2024 保留所有权利",
        "首页 | 关于我们 | 联系我们 | 隐私政策",
        "点击这里订阅我们的新闻",
        "分享到微信 分享到微博",
        "本站使用cookie以提供更好的服务",
    ],
}
SPAM = {
    "en": [
        "BUY CHEAP PILLS NOW!!! BEST PRICE www.cheap-deals.example",
        "WIN A FREE IPHONE click now click now limited offer",
        "hot singles in your area call 555 0100 now",
    ],
    "zh": [
        "免费领取！！！加微信 abc123 日赚千元",
        "特价促销 点击领取 优惠券 限时抢购 包邮",
        "正规代开发票 联系电话 13800000000",
    ],
}


def chunks(texts: list[str], chars: int) -> list[str]:
    """Texts cut into pieces of whole non-empty lines of about ``chars`` characters."""
    out = []
    for text in texts:
        piece: list[str] = []
        size = 0
        for line in text.split("\n"):
            if not line.strip():
                continue
            piece.append(line)
            size += len(line)
            if size >= chars:
                out.append("\n".join(piece))
                piece, size = [], 0
        if size >= chars // 2:
            out.append("\n".join(piece))
    return out


def corrupt(text: str, lang: str, rng: random.Random) -> str:
    """Words shuffled within each line, boilerplate and spam lines mixed in."""
    lines = []
    for line in text.split("\n"):
        if lang == "zh":
            units = [line[i : i + 2] for i in range(0, len(line), 2)]
        else:
            units = line.split()
        rng.shuffle(units)
        lines.append(("" if lang == "zh" else " ").join(units))
    for _ in range(max(1, len(lines) // 3)):
        pool = BOILERPLATE[lang] if rng.random() < 0.6 else SPAM[lang]
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(pool))
    return "\n".join(lines)


def write_corpus(texts: list[str], lang: str, out: Path, seed: int = 0) -> tuple[str, str]:
    """Write ``pos.jsonl`` and ``neg.jsonl`` under ``out``; return their paths."""
    rng = random.Random(seed)
    pieces = chunks(texts, 400 if lang == "zh" else 600)
    out.mkdir(parents=True, exist_ok=True)
    pos, neg = out / "pos.jsonl", out / "neg.jsonl"
    with open(pos, "w", encoding="utf-8") as p, open(neg, "w", encoding="utf-8") as n:
        for i, piece in enumerate(pieces):
            if i % 2 == 0:
                p.write(json.dumps({"id": f"p{i}", "text": piece}, ensure_ascii=False) + "\n")
            else:
                text = corrupt(piece, lang, rng)
                n.write(json.dumps({"id": f"n{i}", "text": text}, ensure_ascii=False) + "\n")
    return str(pos), str(neg)
