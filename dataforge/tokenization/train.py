"""Train a Jieba + BPE tokenizer: sample text, mark jieba boundaries, train sentencepiece BPE,
write the tokenizer directory.

Determinism: the sample is chosen by id hash (not file order or RNG), the BPE merges do not
depend on the thread count, and the fields of the model file that describe the machine
rather than the model (``model_prefix``, ``num_threads``) are cleared before writing, so
training twice on the same input gives byte-identical ``spm.model`` files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from dataforge.io.owned_output import check_dir_target, owned_dir
from dataforge.text.surrogates import replace_each_surrogate
from dataforge.tokenization.corpus import Sample, sample_texts
from dataforge.tokenization.segment import ENGINES, MARKER, Segmenter
from dataforge.tokenization.tokenizer import FORMAT_VERSION, Tokenizer, split_long
from dataforge.typed_config import ConfigError, from_mapping, read_yaml_file

__all__ = ["DEFAULT_ENGINE", "TokenizerSpec", "load_spec", "train_tokenizer"]

DEFAULT_ENGINE = "rjieba"
"""rjieba: on the demo corpus it segments ~20x faster than jieba with ~98-99% of jieba's
word boundaries (figures: benchmarks/tokenizer_speed.py); see the issue 3 report."""

CONTROL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # ids 0..3, in this order
CHAT_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
_SENTENCE_CHARS = 8192  # training "sentences"; longer texts are cut at safe boundaries


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """What to train: the YAML spec ``tokenizers/<name>.yaml`` maps 1:1 onto these fields."""

    name: str = "tokenizer"
    inputs: tuple[str, ...] = ()
    """File globs (jsonl[.gz|.zst], parquet, txt) or ``dataforge run`` output directories."""
    text_key: str = "text"
    id_key: str | None = "id"
    """Key of a stable record id (the sample hashes it); null derives ids from file + line."""
    vocab_size: int = 32000
    max_chars: int = 20_000_000
    """Character budget of the training sample."""
    seed: int = 0
    """Salt of the id hash that picks the sample."""
    clean: bool = True
    """Pass the sample through the ``clean`` op (default settings) first, so that the model
    learns the text the pipeline tokenizes (NFKC, tidy whitespace) rather than raw input."""
    engine: str = DEFAULT_ENGINE
    """Chinese segmenter: ``jieba`` or ``rjieba``; encoding always uses the trained one."""
    hmm: bool = True
    """Let the segmenter find out-of-dictionary words (jieba's HMM)."""
    user_dict: str | None = None
    """Optional jieba user dictionary (``word [freq] [tag]`` per line); copied into the output."""
    character_coverage: float = 0.9995
    """Share of characters given their own piece; rarer ones use byte fallback."""
    max_piece_chars: int = 16
    chat_tokens: tuple[str, ...] = CHAT_TOKENS
    num_reserved: int = 8
    """Spare special ids ``<|reserved_0|>``... for later markers, without retraining."""
    num_threads: int = 2
    """Training threads (the result does not depend on them)."""

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine {self.engine!r}; valid: {', '.join(ENGINES)}")
        if self.vocab_size < 400:
            raise ValueError(
                f"vocab_size {self.vocab_size}: must be >= 400 (256 byte ids + specials + chars)"
            )
        if not 0.9 <= self.character_coverage <= 1.0:
            raise ValueError(f"character_coverage {self.character_coverage}: must be in [0.9, 1.0]")
        for field in ("max_chars", "max_piece_chars", "num_threads"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} {getattr(self, field)}: must be >= 1")
        if self.num_reserved < 0:
            raise ValueError(f"num_reserved {self.num_reserved}: must be >= 0")
        if len(set(self.chat_tokens)) != len(self.chat_tokens) or any(
            not t for t in self.chat_tokens
        ):
            raise ValueError(
                f"chat_tokens {list(self.chat_tokens)}: must be distinct non-empty strings"
            )

    def user_defined_symbols(self) -> list[str]:
        """Chat markers, reserved markers and the boundary marker, in id order after <unk>."""
        reserved = [f"<|reserved_{i}|>" for i in range(self.num_reserved)]
        return [*self.chat_tokens, *reserved, MARKER]


def load_spec(path: str | Path) -> tuple[TokenizerSpec, Path]:
    """Read ``tokenizers/<name>.yaml``; relative paths resolve against its directory.

    Returns:
        the spec and the default output directory (``<spec dir>/<name>``).

    Raises:
        dataforge.typed_config.ConfigError: unknown keys, bad values or an unreadable file.
    """
    path = Path(path)
    raw = read_yaml_file(path, "tokenizer spec")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a tokenizer spec is a mapping of keys to values")
    base = path.parent
    if isinstance(raw.get("inputs"), str):
        raw["inputs"] = [raw["inputs"]]
    raw["inputs"] = [str(base / p) for p in raw.get("inputs") or []]
    if raw.get("user_dict"):
        raw["user_dict"] = str(base / raw["user_dict"])
    spec = from_mapping(TokenizerSpec, raw, str(path))
    if not spec.inputs:
        raise ConfigError(f"{path}: 'inputs' must list at least one glob or run directory")
    return spec, base / spec.name


def _training_sentences(texts: list[str], segmenter: Segmenter) -> list[str]:
    """Marked training text, cut into sentencepiece "sentences" at safe boundaries."""
    # The marker and U+2581 have special meaning to the model; a literal one in training
    # text would teach it wrong pieces (encoding escapes them as bytes instead).
    texts = [t.replace(MARKER, "").replace("\u2581", " ") for t in texts]
    texts = [replace_each_surrogate(t) for t in texts]  # as encoding does
    sentences: list[str] = []
    for start in range(0, len(texts), 1000):
        for marked in segmenter.mark_batch(texts[start : start + 1000]):
            sentences.extend(split_long(marked, _SENTENCE_CHARS))
    return sentences


def _clean(texts: list[str]) -> list[str]:
    import pyarrow as pa

    from dataforge.text.clean import CleanConfig, clean_text

    config = CleanConfig()
    out = []
    for start in range(0, len(texts), 1000):
        out.extend(
            t
            for t in clean_text(
                pa.array(texts[start : start + 1000], pa.string()), config
            ).to_pylist()
            if t
        )
    return out


def _canonical_model(model_bytes: bytes) -> bytes:
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    proto = model_pb2.ModelProto()
    proto.ParseFromString(model_bytes)
    for field in ("model_prefix", "num_threads", "input"):
        proto.trainer_spec.ClearField(field)
    return proto.SerializeToString()


def _train_sentencepiece(spec: TokenizerSpec, sentences: list[str], quiet: bool) -> bytes:
    import sentencepiece as spm

    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=buffer,
            model_type="bpe",
            vocab_size=spec.vocab_size,
            character_coverage=spec.character_coverage,
            # identity: no NFKC or whitespace folding (clean already normalized), so every
            # character, newline and run of spaces survives the round trip
            normalization_rule_name="identity",
            add_dummy_prefix=False,
            remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True,
            split_digits=True,
            byte_fallback=True,
            max_sentencepiece_length=spec.max_piece_chars,
            max_sentence_length=4 * _SENTENCE_CHARS + 16,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            num_threads=spec.num_threads,
            pad_id=0,
            bos_id=1,
            eos_id=2,
            unk_id=3,
            pad_piece="<pad>",
            bos_piece="<bos>",
            eos_piece="<eos>",
            unk_piece="<unk>",
            user_defined_symbols=spec.user_defined_symbols(),
            minloglevel=2 if quiet else 0,
        )
    except RuntimeError as exc:
        raise ValueError(f"sentencepiece training failed: {exc}") from exc
    return _canonical_model(buffer.getvalue())


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("dataforge", "sentencepiece", "jieba", "rjieba"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _tokenizer_json(
    spec: TokenizerSpec, model: bytes, sample: Sample, num_sentences: int, has_user_dict: bool
) -> dict[str, Any]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    specials = [*CONTROL_TOKENS, *[s for s in spec.user_defined_symbols() if s != MARKER]]
    return {
        "format_version": FORMAT_VERSION,
        "name": spec.name,
        "model_type": "bpe",
        "vocab_size": sp.get_piece_size(),
        "special_tokens": {piece: sp.piece_to_id(piece) for piece in specials},
        "boundary_id": sp.piece_to_id(MARKER),
        "segmenter": {
            "engine": spec.engine,
            "hmm": spec.hmm,
            "user_dict": "userdict.txt" if has_user_dict else None,
            "boundaries": "between two CJK ideographs where the segmenter ends a word",
        },
        "sentencepiece": {
            "normalization_rule_name": "identity",
            "add_dummy_prefix": False,
            "remove_extra_whitespaces": False,
            "allow_whitespace_only_pieces": True,
            "split_digits": True,
            "byte_fallback": True,
            "character_coverage": spec.character_coverage,
            "max_sentencepiece_length": spec.max_piece_chars,
        },
        "training_data": {
            "inputs": list(spec.inputs),
            "max_chars": spec.max_chars,
            "seed": spec.seed,
            "clean": spec.clean,
            "records_seen": sample.num_records,
            "records_used": len(sample.texts),
            "chars_used": sum(map(len, sample.texts)),
            "sentences": num_sentences,
            "sha256": sample.sha256,
        },
        "spm_model_sha256": hashlib.sha256(model).hexdigest(),
        "versions": _versions(),
    }


TRAIN_WRITER = "dataforge tokenizer train"
_TOKENIZER_FILES = {"spm.model", "spm.vocab", "tokenizer.json", "userdict.txt"}


def _is_unmarked_tokenizer(path: Path) -> bool:
    """A tokenizer directory written before output markers: ``tokenizer.json`` and
    ``spm.model``, and nothing but the files this command writes."""
    names = {p.name for p in path.iterdir()}
    return {"tokenizer.json", "spm.model"} <= names <= _TOKENIZER_FILES


def train_tokenizer(
    spec: TokenizerSpec, out_dir: str | Path, overwrite: bool = False, quiet: bool = True
) -> Tokenizer:
    """Train on ``spec.inputs`` and write the tokenizer directory ``out_dir`` atomically.

    ``overwrite`` replaces only a tokenizer directory (see :func:`_is_unmarked_tokenizer`
    and :mod:`dataforge.io.owned_output`), never another folder.

    Raises:
        FileExistsError: ``out_dir`` exists and ``overwrite`` is False.
        OutputPathError: ``out_dir`` is not a folder, or a folder this command did not write.
        FileNotFoundError: an input matches no file.
        ValueError: no usable text, or sentencepiece rejects the settings.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise FileExistsError(f"{out_dir} exists (pass overwrite=True / --overwrite to replace it)")
    check_dir_target(out_dir, TRAIN_WRITER, legacy=_is_unmarked_tokenizer)
    if spec.user_dict and not Path(spec.user_dict).is_file():
        raise FileNotFoundError(f"user_dict {spec.user_dict!r} does not exist")
    sample = sample_texts(
        spec.inputs, spec.max_chars, seed=spec.seed, text_key=spec.text_key, id_key=spec.id_key
    )
    user_dict = Path(spec.user_dict) if spec.user_dict else None
    segmenter = Segmenter(spec.engine, hmm=spec.hmm, user_dict=user_dict)
    texts = _clean(sample.texts) if spec.clean else sample.texts
    sentences = _training_sentences(texts, segmenter)
    model = _train_sentencepiece(spec, sentences, quiet)
    meta = _tokenizer_json(spec, model, sample, len(sentences), user_dict is not None)

    with owned_dir(out_dir, TRAIN_WRITER, legacy=_is_unmarked_tokenizer) as tmp:
        (tmp / "spm.model").write_bytes(model)
        tok = Tokenizer(model, meta, user_dict=user_dict)
        # one JSON string per line: pieces may hold newlines and tabs
        vocab = "".join(
            f"{json.dumps(tok.id_to_token(i), ensure_ascii=False)}\t{i}\n"
            for i in range(tok.vocab_size)
        )
        (tmp / "spm.vocab").write_text(vocab, encoding="utf-8")
        if user_dict:
            shutil.copyfile(user_dict, tmp / "userdict.txt")
        text = json.dumps(meta, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
        (tmp / "tokenizer.json").write_text(text, encoding="utf-8")
    return Tokenizer.load(out_dir)
