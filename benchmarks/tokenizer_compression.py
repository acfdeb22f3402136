"""Tokenizer compression: Jieba + BPE vs plain sentencepiece BPE, on held-out text.

Both models are trained in this process on the same cleaned training split of the demo
corpus with the same sentencepiece settings and vocabulary size; the only difference is
that ours marks jieba word boundaries. Held out: records whose id hash falls in the last
``--holdout-percent`` (never seen in training). Prints tokens per character for Chinese and
English held-out text, the ratio ours / plain (lower is better), and the share of jieba
words (CJK, held-out) that come out as exactly one token.

    .venv/bin/python benchmarks/tokenizer_compression.py [--vocab-size 16000]
        [--max-chars 20000000] [--holdout-percent 5] [--engine rjieba] [--quick]

Needs ``make demo-data``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataforge.text.cjk import cjk_mask  # noqa: E402
from dataforge.text.clean import CleanConfig, clean_text  # noqa: E402
from dataforge.tokenization import TokenizerSpec, train_tokenizer  # noqa: E402
from dataforge.tokenization.corpus import iter_records  # noqa: E402
from dataforge.tokenization.tokenizer import split_long  # noqa: E402
from dataforge.tokenization.train import _train_sentencepiece  # noqa: E402

DEMO = ROOT / "data" / "demo"
SOURCES = {
    "zh": [str(DEMO / "news_zh" / "*.jsonl.zst"), str(DEMO / "reviews_zh" / "*.jsonl.gz")],
    "en": [str(DEMO / "docs_en" / "*.jsonl"), str(DEMO / "pkgdesc_en" / "*.parquet")],
}


def _clean(texts: list[str]) -> list[str]:
    config = CleanConfig()
    out: list[str] = []
    for i in range(0, len(texts), 1000):
        out += [
            t
            for t in clean_text(pa.array(texts[i : i + 1000], pa.string()), config).to_pylist()
            if t
        ]
    return out


def load_split(holdout_percent: int) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """(train records, held-out cleaned texts per language), split by id hash."""
    train: list[tuple[str, str]] = []
    heldout: dict[str, list[str]] = {}
    for lang, globs in SOURCES.items():
        held = []
        for rid, text in iter_records(globs):
            bucket = (
                int.from_bytes(hashlib.blake2b(rid.encode(), digest_size=8).digest(), "little")
                % 100
            )
            if bucket >= 100 - holdout_percent:
                held.append(text)
            else:
                train.append((rid, text))
        heldout[lang] = _clean(held)
    return train, heldout


def token_char_bounds(sp_pieces: list[str], text: str) -> np.ndarray:
    """Character offsets where tokens end (byte-fallback tokens count one byte each)."""
    nbytes = [
        1 if (p.startswith("<0x") and len(p) == 6) else len(p.replace("\u2581", " ").encode())
        for p in sp_pieces
    ]
    byte_ends = np.cumsum(nbytes)
    char_byte_ends = np.cumsum([len(c.encode()) for c in text])
    # a token end that falls inside a character (byte fallback) is not a character boundary
    pos = np.searchsorted(char_byte_ends, byte_ends)
    inside = char_byte_ends[np.minimum(pos, len(char_byte_ends) - 1)] == byte_ends
    return pos[inside] + 1


def single_token_share(pieces_of, texts: list[str], cut) -> tuple[float, float, int]:
    """Share of CJK jieba words that are one token: all words, and words of 2+ characters."""
    single = single_multi = words = multi = 0
    for text in texts:
        ends = set(token_char_bounds(pieces_of(text), text).tolist()) | {0}
        cps = np.frombuffer(text.encode("utf-32-le"), np.uint32)
        cjk = cjk_mask(cps)
        start = 0
        for word in cut(text):
            end = start + len(word)
            if cjk[start:end].all():
                one = (
                    start in ends
                    and end in ends
                    and not any(p in ends for p in range(start + 1, end))
                )
                words += 1
                single += one
                if end - start >= 2:
                    multi += 1
                    single_multi += one
            start = end
    return single / max(words, 1), single_multi / max(multi, 1), words


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--max-chars", type=int, default=20_000_000)
    parser.add_argument("--holdout-percent", type=int, default=5)
    parser.add_argument("--engine", default="rjieba", choices=("jieba", "rjieba"))
    parser.add_argument("--quick", action="store_true", help="3M training chars, vocab 8000")
    args = parser.parse_args()
    if args.quick:
        args.max_chars, args.vocab_size = 3_000_000, 8000
    if not (DEMO / ".done").exists():
        print("needs the demo corpus: make demo-data", file=sys.stderr)
        return 2

    train, heldout = load_split(args.holdout_percent)
    with tempfile.TemporaryDirectory() as tmp:
        train_file = Path(tmp) / "train.jsonl"
        with open(train_file, "w", encoding="utf-8") as f:
            for rid, text in train:
                f.write(json.dumps({"id": rid, "text": text}, ensure_ascii=False) + "\n")
        spec = TokenizerSpec(
            name="bench",
            inputs=(str(train_file),),
            vocab_size=args.vocab_size,
            max_chars=args.max_chars,
            engine=args.engine,
        )
        t0 = time.monotonic()
        ours = train_tokenizer(spec, Path(tmp) / "ours")
        t_ours = time.monotonic() - t0
        # Plain BPE: the same sample, cleaning, settings and sentence cutting, no jieba marks.
        from dataforge.tokenization.corpus import sample_texts

        sample = _clean(sample_texts(spec.inputs, spec.max_chars).texts)
        sentences = [s for t in sample for s in split_long(t.replace("\u2581", " "), 8192)]
        t0 = time.monotonic()
        plain_model = _train_sentencepiece(spec, sentences, quiet=True)
        t_plain = time.monotonic() - t0

    import sentencepiece as spm

    plain_sp = spm.SentencePieceProcessor(model_proto=plain_model)
    print(
        f"training: {len(train)} records ({sum(len(t) for _, t in train) / 1e6:.1f}M chars) "
        f"-> sample {sum(map(len, sample)) / 1e6:.1f}M chars; vocab {args.vocab_size}; "
        f"jieba+BPE {t_ours:.0f}s (incl. sampling), plain BPE {t_plain:.0f}s"
    )
    print(
        f"held out: zh {len(heldout['zh'])} docs {sum(map(len, heldout['zh'])) / 1e6:.2f}M chars, "
        f"en {len(heldout['en'])} docs {sum(map(len, heldout['en'])) / 1e6:.2f}M chars\n"
    )
    print(f"{'tokens/char':<14}{'jieba+BPE':>12}{'plain BPE':>12}{'ratio':>9}")
    for lang in ("zh", "en"):
        texts = heldout[lang]
        chars = sum(map(len, texts))
        ours_tok = sum(map(len, ours.encode_batch(texts)))
        plain_tok = sum(len(ids) for ids in plain_sp.encode(texts))
        assert [ours.decode(ids) for ids in ours.encode_batch(texts)] == texts
        print(
            f"{lang:<14}{ours_tok / chars:>12.4f}{plain_tok / chars:>12.4f}{ours_tok / plain_tok:>9.3f}"
        )
    cut = ours._segmenter.cut
    share_ours = single_token_share(
        lambda t: [ours.id_to_token(i) for i in ours.encode(t)], heldout["zh"], cut
    )
    share_plain = single_token_share(lambda t: plain_sp.encode(t, out_type=str), heldout["zh"], cut)
    print(f"\njieba words (CJK, held-out zh: {share_ours[2]}) that are exactly one token:")
    print(f"  all words      jieba+BPE {share_ours[0]:.3f}   plain BPE {share_plain[0]:.3f}")
    print(f"  2+ characters  jieba+BPE {share_ours[1]:.3f}   plain BPE {share_plain[1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
