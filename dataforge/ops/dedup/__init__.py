"""Near-duplicate removal: exact, MinHash-LSH and SimHash, as a barrier stage.

``prepare`` (per batch, before the barrier) normalizes and shingles the live texts and adds
one signature column, made by the configured method (:mod:`dataforge.ops.dedup.registry`):
``_exact`` (uint64 hash of the normalized text), ``_minhash`` (``minhash.num_perm`` uint32 values as
fixed-size binary) or ``_simhash`` (uint64); MinHash and SimHash also add ``_text_hash``,
the exact hash of the text as they normalize it, so that the planner collapses exact
copies first (:mod:`dataforge.ops.dedup.copies`). The planner (:mod:`dataforge.ops.dedup.planner`)
buckets the signatures on sharded index actors, checks every candidate pair on the shingle
sequences of the two texts (:mod:`dataforge.ops.dedup.verify`: exact Jaccard, and no
merge on shared boilerplate alone) and builds star clusters around the preferred record
(:mod:`dataforge.ops.dedup.star`: the lowest ``(prefer_source rank, id)``; every member
verified against it, never chained). ``apply`` (per task, after the barrier) marks the
others ``dedup:<method>``.

Empty texts (nothing left after normalization: empty, only punctuation or whitespace) get a
null signature and are never clustered: the dedup stage keeps them (``clean`` drops them
earlier in a normal pipeline; here they are counted as ``empty`` in the summary, never
merged into one giant cluster).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from dataforge.io.fs import StorageError, exists, join
from dataforge.ops.barrier import BarrierContext
from dataforge.ops.base import BarrierOp, set_drop_reasons
from dataforge.ops.dedup.config import DedupConfig, KeepConfig, NormalizeConfig
from dataforge.ops.dedup.exact import exact_hashes
from dataforge.ops.dedup.method import DedupMethod
from dataforge.ops.dedup.registry import METHODS
from dataforge.ops.dedup.shingles import (
    ShingleSet,
    normalize_texts,
    normalized_code_points,
    shingle_hashes,
    shingle_kind_for,
)
from dataforge.ops.dedup.verify import Texts
from dataforge.records import ORD
from dataforge.text.script import convert_script

__all__ = ["DECISION_REASON", "TEXT_HASH", "Dedup", "DedupConfig", "KeepConfig", "NormalizeConfig"]

DECISION_REASON = "_dedup_reason"
TEXT_HASH = "_text_hash"
"""Column of the exact hash of the normalized text (verified methods)."""
# Character n-grams for the own-content measure of verification: 3 Chinese characters are
# specific, 3 Latin letters are not ("ion" is in every English page), 6 are.
OWN_CONTENT_NGRAM = {"char": 3, "word": 8}


class Dedup(BarrierOp):
    """Drop near-duplicates, keeping one representative per cluster."""

    name = "dedup"
    Config = DedupConfig

    def setup(self) -> None:
        self._jieba = None
        if self.config.shingle == "jieba":
            import rjieba  # heavy-ish; loaded once per actor

            self._jieba = rjieba

    def __getstate__(self) -> dict[str, Any]:
        # The planner sends the op to its index shards (verification_texts); a module does
        # not pickle, and _normalized sets the segmenter up again where it is needed.
        return {**self.__dict__, "_jieba": None}

    # -- parameters shared with the planner ------------------------------------------------

    @property
    def method(self) -> DedupMethod:
        if getattr(self, "_method", None) is None:
            self._method = METHODS[self.config.method](self.config)
        return self._method

    @property
    def signature_column(self) -> str:
        return f"_{self.config.method}"

    @property
    def text_hash_column(self) -> str | None:
        """Verified methods: the column of each text's exact hash, by which the planner
        collapses exact copies before candidate generation. None for exact, whose
        signature is that hash already."""
        return TEXT_HASH if self.method.verified else None

    def signature_params(self) -> dict[str, Any]:
        """Everything that changes signature values; published with them so that a later
        run can refuse to dedup against incompatible signatures. The names stay the flat
        ones published before the settings were nested (``hash_seed`` is
        ``minhash.hash_seed``), so that signatures of earlier runs remain comparable."""
        cfg = self.config
        params: dict[str, Any] = {
            "method": cfg.method,
            "shingle": cfg.shingle,
            "ngram": cfg.ngram,
            "ngram_words": cfg.ngram_words,
            "lowercase": cfg.lowercase,
            "nfkc": cfg.nfkc,
            "strip_punctuation": cfg.strip_punctuation,
            "hash_seed": cfg.minhash.hash_seed,
            "max_chars": cfg.max_chars,
            "max_shingles": cfg.max_shingles,
        }
        if cfg.normalize.t2s:
            params["t2s"] = True
        params.update(self.method.signature_params())
        return params

    def validate(self) -> list[str]:
        problems = []
        for path in self.config.against:
            published = join(self.context.locate(path), "dedup", "signatures.parquet")
            try:
                if not exists(published):
                    problems.append(f"dedup.against: {published} not found")
            except StorageError as exc:
                problems.append(f"dedup.against: {exc}")
        problems += self.method.problems()
        if self.config.normalize.t2s:
            try:
                import opencc  # noqa: F401
            except ImportError:
                problems.append("dedup.normalize.t2s: opencc is not installed (pip install opencc)")
        return problems

    # -- before the barrier ----------------------------------------------------------------

    def prepare(self, batch: pa.Table) -> pa.Table:
        """Add the signature column (null for texts that normalize to nothing) and, for
        verified methods, the text hash column (null on the same rows)."""
        n = batch.num_rows
        signatures: list[tuple[np.ndarray, Any]] = []
        hashes: list[tuple[np.ndarray, Any]] = []
        if n:
            for kind, idx, texts in self._kind_groups(batch.column("text"), batch.column("lang")):
                values, valid, text_hash = self._signatures(texts, kind)
                signatures.append((idx, (values, valid)))
                hashes.append((idx, (text_hash, valid)))
        batch = batch.append_column(
            self.signature_column, _assemble(signatures, n, self._signature_type())
        )
        if self.text_hash_column is None:
            return batch
        return batch.append_column(self.text_hash_column, _assemble(hashes, n, pa.uint64()))

    def _kind_groups(self, texts: Any, langs: Any):
        """``(shingle kind, row indices, texts)`` per kind present (``exact`` for exact)."""
        if isinstance(langs, pa.ChunkedArray):
            langs = langs.combine_chunks()
        codes = pc.dictionary_encode(pc.fill_null(langs, ""))
        if self.method.uses_shingles:
            names = [shingle_kind_for(self.config.shingle, g) for g in codes.dictionary.to_pylist()]
        else:
            names = ["exact"] * len(codes.dictionary)
        kinds = np.array(names, dtype=object)[codes.indices.to_numpy(zero_copy_only=False)]
        for kind in sorted(set(names)):
            idx = np.flatnonzero(kinds == kind)
            group = texts.take(pa.array(idx))
            group = group.combine_chunks() if isinstance(group, pa.ChunkedArray) else group
            if self.config.normalize.t2s:
                group = convert_script(group, "t2s")
            yield kind, idx, group

    def _normalized(self, texts: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """Normalized texts as ``(code points + 1, offsets)``."""
        cfg = self.config
        if kind == "jieba":
            texts = normalize_texts(texts, nfkc=cfg.nfkc, lowercase=cfg.lowercase, strip=False)
            texts = pc.utf8_slice_codeunits(texts, 0, cfg.max_chars)
            if self._jieba is None:
                self.setup()
            texts = pa.array([" ".join(self._jieba.cut(t)) for t in texts.to_pylist()])
            return normalized_code_points(texts, nfkc=False, lowercase=False, strip=True)
        return normalized_code_points(
            texts,
            nfkc=cfg.nfkc,
            lowercase=cfg.lowercase,
            strip=cfg.strip_punctuation,
            keep_spaces=kind == "word",
            max_chars=cfg.max_chars,
        )

    def _shingles_of(self, points: tuple[np.ndarray, np.ndarray], kind: str) -> ShingleSet:
        cfg = self.config
        as_words = kind in ("word", "jieba")
        n = cfg.ngram_words if as_words and cfg.ngram_words is not None else cfg.ngram
        return shingle_hashes(
            points, "word" if as_words else "char", n, max_shingles=cfg.max_shingles
        )

    def shingles(self, texts: pa.Array, kind: str) -> ShingleSet:
        """Shingle hashes of the texts for one shingle kind."""
        return self._shingles_of(self._normalized(texts, kind), kind)

    def verification_texts(self, texts: Any, langs: Any) -> Texts:
        """What the planner's verification compares, per text in row order: the
        configured shingles and the character n-grams (``OWN_CONTENT_NGRAM``), both in
        text order."""
        rows, shingles, chars = [], [], []
        blocks, max_owns = np.ones(len(texts), np.int64), np.zeros(len(texts))
        templated = np.zeros(len(texts), bool)
        for kind, idx, group in self._kind_groups(texts, langs):
            points = self._normalized(group, "char" if kind == "exact" else kind)
            shingles.append(self._shingles_of(points, "char" if kind == "exact" else kind))
            # Word texts keep their single spaces: the n-grams run over those characters.
            n = OWN_CONTENT_NGRAM["word" if kind == "word" else "char"]
            chars.append(shingle_hashes(points, "char", n, max_shingles=self.config.max_shingles))
            words = kind == "word"
            verify = self.config.verify
            blocks[idx] = verify.block if words else verify.char_block
            max_owns[idx] = verify.max_own if words else verify.char_max_own
            templated[idx] = not words and verify.template_docs > 0
            rows.append(idx)
        return Texts(
            _in_row_order(shingles, rows, len(texts)),
            _in_row_order(chars, rows, len(texts)),
            blocks,
            max_owns,
            templated,
        )

    def _signatures(self, texts: pa.Array, kind: str) -> tuple[np.ndarray, ...]:
        """(values, valid, text hashes) for one kind group. The text hash is the hash
        exact dedup trusts (:func:`~dataforge.ops.dedup.exact.exact_hashes`) of the text
        as normalized for shingling, salted with the shingle kind: an equal hash stands
        for an equal shingle sequence."""
        points = self._normalized(texts, "char" if kind == "exact" else kind)
        text_hash = None
        if self.text_hash_column is not None:
            text_hash = exact_hashes(points) ^ np.uint64(xxhash.xxh64_intdigest(kind))
        if not self.method.uses_shingles:
            return self.method.signatures(None, points), np.diff(points[1]) > 0, text_hash
        shingles = self._shingles_of(points, kind)
        return self.method.signatures(shingles, points), shingles.counts > 0, text_hash

    def _signature_type(self) -> pa.DataType:
        return self.method.signature_type()

    # -- at the barrier --------------------------------------------------------------------

    def plan(self, ctx: BarrierContext) -> dict[str, Any]:
        """The global decision over all prepared parts (:mod:`dataforge.ops.dedup.planner`)."""
        from dataforge.ops.dedup.planner import plan  # deferred: it imports this module

        return plan(self, ctx)

    # -- after the barrier -----------------------------------------------------------------

    def apply(self, batch: pa.Table, decision: pa.Table | None) -> pa.Table:
        """Mark the rows named in ``decision`` (``_ord``, ``_dedup_reason``) as dropped."""
        if decision is None or decision.num_rows == 0:
            return batch
        ords = batch.column(ORD).to_numpy(zero_copy_only=False)
        dec_ord = decision.column(ORD).to_numpy(zero_copy_only=False)
        dec_reason = np.array(decision.column(DECISION_REASON).to_pylist(), dtype=object)
        order = np.argsort(dec_ord)
        dec_ord, dec_reason = dec_ord[order], dec_reason[order]
        pos = np.clip(np.searchsorted(dec_ord, ords), 0, len(dec_ord) - 1)
        hit = dec_ord[pos] == ords
        reasons = np.where(hit, dec_reason[pos], None).tolist()
        return set_drop_reasons(batch, reasons)


def _assemble(parts: list[tuple[np.ndarray, Any]], n: int, kind: pa.DataType) -> pa.Array:
    """Scatter per-kind ``(values, valid)`` back into row order, null where not valid."""
    valid = np.zeros(n, dtype=bool)
    values: np.ndarray | None = None
    for idx, (vals, ok) in parts:
        if values is None:
            values = np.zeros((n, *vals.shape[1:]), dtype=vals.dtype)
        values[idx] = vals
        valid[idx] = ok
    if values is None:
        return pa.nulls(n, kind)
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    data = pa.py_buffer(np.ascontiguousarray(values).tobytes())
    null_count = int(n - valid.sum())
    return pa.Array.from_buffers(kind, n, [bitmap, data], null_count)


def _in_row_order(groups: list[ShingleSet], rows: list[np.ndarray], n: int) -> ShingleSet:
    """One ShingleSet in row order from per-group sets of the rows ``rows[i]``: each
    group's hashes are scattered to their documents' places (no sort)."""
    counts = np.zeros(n, dtype=np.int64)
    for sets, idx in zip(groups, rows, strict=True):
        counts[idx] = sets.counts
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if not groups:
        return ShingleSet.empty(n)
    # 32 bits per shingle are enough to compare two documents (a false match between two
    # of their shingles: ~n^2 / 2^33), and halve what travels to the index shards.
    hashes = np.empty(offsets[-1], dtype=np.uint32)
    for sets, idx in zip(groups, rows, strict=True):
        # Hash k of the group goes to its document's start plus its place in the document.
        shift = np.repeat(offsets[idx] - (sets.offsets[:-1] - sets.offsets[0]), sets.counts)
        shift += np.arange(len(shift), dtype=np.int64)
        hashes[shift] = sets.hashes[sets.offsets[0] : sets.offsets[-1]]
    return ShingleSet(hashes, offsets)
