"""Training a KenLM model: normalize, tokenize, ``lmplz``, ``build_binary``, model card.

Lines are tokenized by the chosen segmentation (:mod:`dataforge.lm.tokens`), which the
card records so that scoring tokenizes the same way.

``lmplz`` and ``build_binary`` are built from the kenlm source distribution by
``make kenlm`` into ``build/kenlm/bin/`` (see ``mk/kenlm.mk``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path

import numpy as np

from dataforge.io.files import match_files
from dataforge.io.owned_output import check_file_target
from dataforge.lm import tokens as lm_tokens
from dataforge.lm.card import ModelCard, card_path, read_card, write_card
from dataforge.lm.corpus import id_hash_percent, read_documents
from dataforge.lm.score import PerplexityScorer
from dataforge.lm.tokens import DEFAULT_SEGMENTATION, PieceTokenizer, TokenRenderer, make_renderer
from dataforge.text.normalize import NORMALIZATION, normalize_documents

__all__ = ["MAX_ORDER", "LMOptions", "find_kenlm_tool", "train_lm"]

MAX_ORDER = 6  # KENLM_MAX_ORDER of the cmake build (kenlm's default)
_MEMORY_RE = re.compile(r"^\d+(\.\d+)?[%bKMGTkmgt]?$")
_HELDOUT_EVAL_DOCS = 2000
_REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN_WRITER = "dataforge lm train"


def find_kenlm_tool(name: str, kenlm_bin: str | Path | None = None) -> Path:
    """Locate ``lmplz`` or ``build_binary``.

    Search order: ``kenlm_bin``, ``$DATAFORGE_KENLM_BIN``, ``build/kenlm/bin`` under the
    current directory and under the repository, then ``PATH``.

    Raises:
        FileNotFoundError: not found (the message says to run ``make kenlm``).
    """
    dirs = [
        kenlm_bin,
        os.environ.get("DATAFORGE_KENLM_BIN"),
        "build/kenlm/bin",
        _REPO_ROOT / "build/kenlm/bin",
    ]
    for d in dirs:
        if d and (Path(d) / name).is_file() and os.access(Path(d) / name, os.X_OK):
            return Path(d) / name
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    raise FileNotFoundError(
        f"KenLM tool {name!r} not found in {[str(d) for d in dirs if d]} or PATH; run `make kenlm`"
    )


def _check_args(order: int, prune: Sequence[int], memory: str, holdout_percent: float) -> None:
    if not 1 <= order <= MAX_ORDER:
        raise ValueError(f"order must be in 1..{MAX_ORDER}: {order}")
    if len(prune) > order or any(p < 0 for p in prune) or list(prune) != sorted(prune):
        raise ValueError(
            f"prune: at most {order} non-negative, non-decreasing counts: {list(prune)}"
        )
    if prune and prune[0] != 0:
        raise ValueError(
            f"prune: lmplz cannot prune unigrams, the first count must be 0: {list(prune)}"
        )
    if not _MEMORY_RE.match(memory):
        raise ValueError(f"memory {memory!r}: a size like 1G, 500M or a share like 20%")
    if not 0.0 <= holdout_percent < 100.0:
        raise ValueError(f"holdout_percent must be in [0, 100): {holdout_percent}")


@dataclasses.dataclass(frozen=True)
class LMOptions:
    """How :func:`train_lm` builds a model (checked when built; see its arguments)."""

    lang: str
    segmentation: str = DEFAULT_SEGMENTATION
    order: int = 5
    prune: tuple[int, ...] = ()
    memory: str = "1G"
    holdout_percent: float = 0.0
    text_key: str = "text"
    id_key: str | None = "id"
    binary_type: str = "probing"
    discount_fallback: bool = False

    def __post_init__(self) -> None:
        _check_args(self.order, self.prune, self.memory, self.holdout_percent)
        if self.binary_type not in ("probing", "trie"):
            raise ValueError(f"binary_type {self.binary_type!r}; valid: probing, trie")


@dataclasses.dataclass(frozen=True)
class KenLMTools:
    """The two KenLM programs a model is built with."""

    lmplz: Path
    build_binary: Path

    @classmethod
    def find(cls, kenlm_bin: str | Path | None) -> KenLMTools:
        return cls(find_kenlm_tool("lmplz", kenlm_bin), find_kenlm_tool("build_binary", kenlm_bin))


@dataclasses.dataclass(frozen=True)
class TrainingText:
    """The normalized, tokenized training split and what the card records of it."""

    path: Path
    stats: dict[str, int | str]
    heldout: list[str]
    """A deterministic sample of the held-out documents (lowest id hashes first)."""


def _run(cmd: list[str], log_path: Path) -> None:
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{Path(cmd[0]).name} failed with exit code {proc.returncode}:\n{tail}")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_training_text(
    patterns: Sequence[str],
    renderer: TokenRenderer | lm_tokens.CharRenderer,
    text_path: Path,
    options: LMOptions,
) -> TrainingText:
    """Normalize + tokenize the training split into ``text_path``.

    Raises:
        ValueError: no training text is left after normalization.
    """
    holdout_percent, text_key, id_key = options.holdout_percent, options.text_key, options.id_key
    digest = hashlib.sha256()
    stats = {"documents": 0, "lines": 0, "tokens": 0, "holdout_documents": 0}
    heldout: list[tuple[float, str]] = []
    with open(text_path, "wb") as out:
        for pattern in patterns:
            for batch in read_documents(pattern, text_key=text_key, id_key=id_key):
                texts = batch.column("text").to_pylist()
                split = id_hash_percent(batch.column("id").to_pylist())
                train_idx = np.flatnonzero(split >= holdout_percent)
                for i in np.flatnonzero(split < holdout_percent):
                    heldout.append((split[i], texts[i]))
                stats["holdout_documents"] += len(texts) - len(train_idx)
                lines, counts = normalize_documents([texts[i] for i in train_idx])
                non_empty = np.fromiter(map(bool, lines), bool, count=len(lines))
                owners = np.repeat(np.arange(len(train_idx)), counts)[non_empty]
                stats["documents"] += len(np.unique(owners))
                sentences, num_tokens = renderer.render([line for line in lines if line])
                if sentences:
                    chunk = ("\n".join(sentences) + "\n").encode()
                    out.write(chunk)
                    digest.update(chunk)
                stats["lines"] += len(sentences)
                stats["tokens"] += int(num_tokens.sum())
                if len(heldout) > 4 * _HELDOUT_EVAL_DOCS:  # bound memory: keep the lowest hashes
                    heldout = sorted(heldout)[:_HELDOUT_EVAL_DOCS]
    if not stats["tokens"]:
        raise ValueError(f"no training text in {list(patterns)} after normalization")
    stats["sha256"] = digest.hexdigest()
    return TrainingText(
        text_path, stats, [text for _, text in sorted(heldout)[:_HELDOUT_EVAL_DOCS]]
    )


def train_lm(
    inputs: str | Sequence[str],
    out: str | Path,
    *,
    lang: str,
    tokenizer: str | Path | PieceTokenizer | None,
    segmentation: str = DEFAULT_SEGMENTATION,
    order: int = 5,
    prune: Sequence[int] = (),
    memory: str = "1G",
    holdout_percent: float = 0.0,
    text_key: str = "text",
    id_key: str | None = "id",
    binary_type: str = "probing",
    discount_fallback: bool = False,
    kenlm_bin: str | Path | None = None,
) -> ModelCard:
    """Train a KenLM model on documents and write it with its card (``<out>.json``).

    Args:
        inputs: glob pattern(s) of JSON lines (.gz/.zst), parquet or txt files.
        out: binary model path; the card goes to ``<out>.json``.
        lang: language code recorded in the card.
        tokenizer: project tokenizer directory, or a loaded tokenizer (with ``.path``);
            None for ``chars``.
        segmentation: ``sentencepiece`` (its ``spm.model`` alone, CCNet's way, fast),
            ``tokenizer`` (the full project tokenizer: jieba + BPE) or ``chars`` (one token
            per character, no tokenizer); see :mod:`dataforge.lm.tokens`.
        order: n-gram order.
        prune: lmplz ``--prune`` count thresholds per order (first must be 0).
        memory: lmplz ``-S`` bound (``1G``, ``20%``); keeps a shared machine usable.
        holdout_percent: documents whose id hash falls below it are not trained on; a
            sample of them is scored and its perplexity quantiles stored in the card.
        text_key: JSON/parquet field holding the text.
        id_key: field holding a stable id (``None``: derived from file and line).
        binary_type: ``probing`` (fast) or ``trie`` (small).
        discount_fallback: pass ``--discount_fallback`` (needed on tiny corpora).
        kenlm_bin: directory holding lmplz/build_binary (default: see :func:`find_kenlm_tool`).

    Raises:
        ValueError: bad arguments or no training text; FileNotFoundError: missing input
            or tools; RuntimeError: lmplz/build_binary failed (with their log tail).
    """
    patterns = [inputs] if isinstance(inputs, str) else list(inputs)
    options = LMOptions(
        lang=lang,
        segmentation=segmentation,
        order=order,
        prune=tuple(prune),
        memory=memory,
        holdout_percent=holdout_percent,
        text_key=text_key,
        id_key=id_key,
        binary_type=binary_type,
        discount_fallback=discount_fallback,
    )
    encoder, tokenizer_dir = _encoder(tokenizer, segmentation)
    tools = KenLMTools.find(kenlm_bin)
    files = [f.path for p in patterns for f in match_files(p)]
    out = _check_outputs(Path(out))
    with _work_dir(out) as work:
        text = _write_training_text(patterns, make_renderer(encoder), work / "train.txt", options)
        _build_model(tools, work, text.path, out, options)
        heldout_ppl = _heldout_quantiles(out, encoder, text.heldout) if text.heldout else None
        card = _model_card(out, options, encoder, tokenizer_dir, files, text, tools, heldout_ppl)
        write_card(out, card)
    return card


@contextlib.contextmanager
def _work_dir(out: Path) -> Iterator[Path]:
    """A scratch directory beside ``out`` (same filesystem: the model is renamed into place),
    removed afterwards whatever happens."""
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.work-", dir=out.parent))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)  # ours: made by mkdtemp above


def _model_card(
    out: Path,
    options: LMOptions,
    encoder: PieceTokenizer | lm_tokens.CharRenderer,
    tokenizer_dir: str,
    files: list[str],
    text: TrainingText,
    tools: KenLMTools,
    heldout_ppl: dict | None,
) -> ModelCard:
    """The card of the model just written to ``out``: how it was trained and on what."""
    stats = text.stats
    return ModelCard(
        lang=options.lang,
        order=options.order,
        prune=options.prune,
        normalization=NORMALIZATION,
        tokenizer_path=os.path.relpath(Path(tokenizer_dir).resolve(), out.parent.resolve())
        if tokenizer_dir
        else "",
        tokenizer_fingerprint=encoder.fingerprint,
        token_rendering="chars" if options.segmentation == "chars" else "ids",
        segmentation=options.segmentation,
        inputs=tuple(files),
        training_sha256=str(stats["sha256"]),
        documents=int(stats["documents"]),
        lines=int(stats["lines"]),
        tokens=int(stats["tokens"]),
        holdout_percent=float(options.holdout_percent),
        holdout_documents=int(stats["holdout_documents"]),
        model_sha256=sha256_file(out),
        versions=_versions(tools.lmplz),
        extra={"heldout_ppl": heldout_ppl} if heldout_ppl else {},
    )


def _is_our_model(path: Path) -> bool:
    """``path`` is a model this command wrote: a model card is beside it (its sha256 is
    not compared: a kill between the model's rename and the card's leaves an older card)."""
    return _is_our_card(card_path(path))


def _is_our_card(path: Path) -> bool:
    try:
        read_card(Path(str(path).removesuffix(".json")))
    except (FileNotFoundError, ValueError):
        return False
    return True


def _check_outputs(out: Path) -> Path:
    """Refuse ``out`` (and its card ``out.json``) unless absent or this command's own
    earlier model and card (:mod:`dataforge.io.owned_output`)."""
    check_file_target(out, TRAIN_WRITER, _is_our_model, make_parents=True)
    check_file_target(card_path(out), TRAIN_WRITER, _is_our_card)
    return out


def _encoder(
    tokenizer: str | Path | PieceTokenizer | None, segmentation: str
) -> tuple[PieceTokenizer | lm_tokens.CharRenderer, str]:
    """The segmentation's encoder and the tokenizer directory the card names ("" for
    ``chars``)."""
    if segmentation not in lm_tokens.SEGMENTATIONS:
        raise ValueError(
            f"segmentation {segmentation!r}; valid: {', '.join(lm_tokens.SEGMENTATIONS)}"
        )
    if tokenizer is None and segmentation != "chars":
        raise ValueError(f"segmentation {segmentation!r} needs a tokenizer directory")
    tok = lm_tokens.load_encoder(tokenizer, segmentation)
    if segmentation == "chars":
        return tok, ""
    if isinstance(tokenizer, (str, Path)):
        return tok, str(tokenizer)
    return tok, str(getattr(tok, "path", "") or "")


def _build_model(
    tools: KenLMTools, work: Path, text_path: Path, out: Path, options: LMOptions
) -> None:
    """lmplz on the training text (ARPA in ``work``), then build_binary into ``out``
    (renamed into place whole: a kill never leaves a partial model there)."""
    arpa, log = work / "model.arpa", work / "kenlm.log"
    cmd = [str(tools.lmplz), "-o", str(options.order), "-S", options.memory, "-T", str(work)]
    cmd += ["--text", str(text_path), "--arpa", str(arpa)]
    if options.prune:
        cmd += ["--prune", *map(str, options.prune)]
    if options.discount_fallback:
        cmd.append("--discount_fallback")
    _run(cmd, log)
    tmp_model = work / "model.bin"
    _run([str(tools.build_binary), options.binary_type, str(arpa), str(tmp_model)], log)
    _check_outputs(out)  # it may have changed while lmplz ran
    os.replace(tmp_model, out)  # ours: out checked just above, tmp_model in our mkdtemp


def _heldout_quantiles(model: Path, tok, heldout: list[str]) -> dict:
    """Perplexity quantiles of the held-out documents under the new model (for the card)."""
    ppl = PerplexityScorer(model, tok).score_documents(heldout).ppl
    ppl = ppl[~np.isnan(ppl)]
    return {
        "documents": int(ppl.size),
        **{f"p{q}": round(float(np.percentile(ppl, q)), 1) for q in (10, 30, 50, 60, 90)},
    }


def _versions(lmplz: Path) -> dict[str, str]:
    # `make kenlm` leaves build/kenlm/.built-<sdist version> next to bin/
    stamps = sorted(lmplz.resolve().parent.parent.glob(".built-*"))
    tools = stamps[-1].name.removeprefix(".built-") if stamps else "unknown"
    versions = {"python": platform.python_version(), "kenlm_tools": tools}
    for dist in ("dataforge", "kenlm"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "unknown"
    versions["platform"] = sys.platform
    return versions
