"""Tokenizer conversion for exports (``hf_export.bpe_tokenizer_json``): time per piece.

Builds sentencepiece BPE models of 16k and 128k pieces in this process (bytes, single
characters, then pieces that concatenate two earlier pieces, as BPE merges do, plus the
chat markers as user-defined pieces), converts each, and prints the time per piece; a
linear conversion keeps it flat from 16k to 128k. The baseline is the previous
conversion, which re-parsed the model once per piece to find the user-defined pieces;
it is measured at ``--baseline-pieces`` (quadratic: 16k pieces take about 40 s on one
core) and printed as a ratio against the current conversion of the same model.

    .venv/bin/python benchmarks/export_time.py [--sizes 16000 128000] [--baseline-pieces 4000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataforge.tokenization.hf_export import bpe_tokenizer_json  # noqa: E402

USER = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")


def build_model(n_pieces: int, seed: int = 0) -> bytes:
    """A serialized sentencepiece BPE model with ``n_pieces`` pieces."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.trainer_spec.model_type = pb.TrainerSpec.BPE
    proto.trainer_spec.vocab_size = n_pieces
    proto.trainer_spec.byte_fallback = True
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = False
    kind = pb.ModelProto.SentencePiece
    specials = [("<pad>", kind.CONTROL), ("<bos>", kind.CONTROL), ("<eos>", kind.CONTROL)]
    specials += [("<unk>", kind.UNKNOWN)] + [(p, kind.USER_DEFINED) for p in USER]
    specials += [(f"<0x{b:02X}>", kind.BYTE) for b in range(256)]
    for piece, type_ in specials:
        proto.pieces.add(piece=piece, score=0.0, type=type_)
    chars = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)] + list("abcdefghijklmnop\u2581")
    normal, seen = list(chars), set(chars)
    rng = random.Random(seed)
    while len(specials) + len(normal) < n_pieces:
        piece = rng.choice(normal) + rng.choice(normal[: len(normal) // 2 + 1])
        if piece not in seen and len(piece) <= 8:
            seen.add(piece)
            normal.append(piece)
    for rank, piece in enumerate(normal):
        proto.pieces.add(piece=piece, score=-float(rank), type=kind.NORMAL)
    return proto.SerializeToString()


def baseline_tokenizer_json(spm_model: bytes) -> str:
    """The previous conversion: the set of user-defined pieces re-read for every piece."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    sp = spm.SentencePieceProcessor(model_proto=spm_model)

    def user_defined() -> set[str]:
        proto = pb.ModelProto()
        proto.ParseFromString(sp.serialized_model_proto())
        return {p.piece for p in proto.pieces if p.type == pb.ModelProto.SentencePiece.USER_DEFINED}

    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or sp.is_unused(i)):
            _ = sp.id_to_piece(i) not in user_defined()
    return bpe_tokenizer_json(spm_model)


def timed(fn, arg) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = fn(arg)
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16000, 128000])
    parser.add_argument("--baseline-pieces", type=int, default=4000)
    args = parser.parse_args()
    for n in args.sizes:
        seconds, _ = timed(bpe_tokenizer_json, build_model(n))
        print(f"{n:>7} pieces: {seconds:7.2f} s, {seconds / n * 1e6:6.1f} us per piece")
    model = build_model(args.baseline_pieces)
    new, out_new = timed(bpe_tokenizer_json, model)
    old, out_old = timed(baseline_tokenizer_json, model)
    assert out_new == out_old
    print(
        f"{args.baseline_pieces:>7} pieces: per-piece re-parse {old:.2f} s, one parse "
        f"{new:.3f} s, ratio {old / new:.1f}x"
    )


if __name__ == "__main__":
    main()
