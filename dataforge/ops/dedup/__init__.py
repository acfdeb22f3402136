"""Near-duplicate removal: exact, MinHash-LSH and SimHash, as a barrier stage.

``prepare`` (per batch, before the barrier) normalizes and shingles the live texts and adds
one signature column: ``_exact`` (uint64 hash of the normalized text), ``_minhash``
(``num_perm`` uint32 values as fixed-size binary) or ``_simhash`` (uint64). The planner
(``dataforge.runtime.barriers.dedup``) buckets the signatures on sharded index actors, joins
buckets into connected components and keeps one representative per component: the lowest
``(prefer_source rank, id)``. ``apply`` (per task, after the barrier) marks the others
``dedup:<method>``.

Empty texts (nothing left after normalization: empty, only punctuation or whitespace) get a
null signature and are never clustered: the dedup stage keeps them (``clean`` drops them
earlier in a normal pipeline; here they are counted as ``empty`` in the summary, never
merged into one giant cluster).
"""

from __future__ import annotations

import array
import dataclasses
import itertools
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.ops.base import BarrierOp, set_drop_reasons
from dataforge.ops.dedup.exact import exact_hashes
from dataforge.ops.dedup.minhash import minhash_signatures, optimal_bands
from dataforge.ops.dedup.shingles import (
    ShingleSet,
    normalize_texts,
    normalized_code_points,
    shingle_hashes,
    shingle_kind_for,
)
from dataforge.ops.dedup.simhash import simhash_fingerprints
from dataforge.records import ORD

__all__ = ["DECISION_REASON", "Dedup", "KeepConfig", "SIGNATURE_COLUMNS"]

SIGNATURE_COLUMNS = {"exact": "_exact", "minhash": "_minhash", "simhash": "_simhash"}
DECISION_REASON = "_dedup_reason"
METHODS = ("exact", "minhash", "simhash")
ENGINES = ("rensa", "numpy")
# An index entry is 8 bytes (uint32 bucket key + uint32 document key) per band: derived
# banding stays within 200 bytes per document.
MAX_DERIVED_BANDS = 25


@dataclasses.dataclass(frozen=True)
class KeepConfig:
    """Which member of a duplicate cluster survives."""

    prefer_source: tuple[str, ...] = ()
    """Sources in order of preference; the rest rank after them. Ties: lowest id."""


@dataclasses.dataclass(frozen=True)
class DedupConfig:
    method: Literal["exact", "minhash", "simhash"] = "minhash"
    threshold: float = 0.4
    """MinHash: Jaccard similarity of the shingle sets from which two documents are
    duplicates: banding is tuned for it and candidates are verified against it (0.4 with
    char 3-grams / word 2-grams after normalization: see benchmarks/dedup_quality.py)."""
    num_perm: int = 128
    bands: int | None = None
    """MinHash bands; with ``rows``, overrides the derivation from ``threshold``."""
    rows: int | None = None
    shingle: Literal["auto", "char", "word", "jieba"] = "auto"
    """``auto``: characters for zh/ja/ko, words otherwise; ``jieba``: jieba words."""
    ngram: int = 3
    """Shingle size: characters (``char``) or words (``word``, ``jieba``)."""
    ngram_words: int | None = 2
    """Word n-gram size for word/jieba shingles; None uses ``ngram`` for them too."""
    lowercase: bool = True
    nfkc: bool = True
    strip_punctuation: bool = True
    """Remove punctuation, symbols and whitespace runs before shingling (word shingles
    keep one space between words)."""
    bits: int = 64
    max_hamming: int = 6
    """SimHash: fingerprints within this Hamming distance are duplicates (6 measured best
    at precision 1.0 in benchmarks/dedup_quality.py; 3 finds little beyond exact copies)."""
    simhash_blocks: int | None = None
    """SimHash permuted-block tables: blocks per fingerprint (default ``max_hamming + 2``:
    ``C(k + 2, 2)`` tables keyed by 2 blocks, i.e. 28 tables with 16-bit keys for k=6)."""
    weighting: Literal["tf", "log_tf", "binary"] = "tf"
    """SimHash feature weight: term frequency, 1 + ln(tf), or 1."""
    keep: KeepConfig = KeepConfig()
    against: tuple[str, ...] = ()
    """Previous run directories (OUT) whose published signatures new records are checked
    against; a new record that duplicates one of them is dropped."""
    index_shards: int | None = None
    """Index actors (default: the cluster's CPUs)."""
    engine: Literal["rensa", "numpy"] = "rensa"
    """MinHash engine over our shingle hashes: ``rensa`` (Rust, measured faster) or numpy."""
    hash_seed: int = 0
    """Seed of the hash permutations (fixed, not the pipeline seed, so that runs with
    different pipeline seeds can dedup against each other)."""
    max_chars: int = 1_000_000
    """Normalized characters shingled per document (bounded work for huge documents)."""
    max_shingles: int = 20_000
    """Shingles per document; more keep a consistent bottom-k sample."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r}; valid: {', '.join(METHODS)}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine {self.engine!r}; valid: {', '.join(ENGINES)}")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if not 1 <= self.num_perm <= 1024:
            raise ValueError(f"num_perm must be in [1, 1024], got {self.num_perm}")
        if (self.bands is None) != (self.rows is None):
            raise ValueError("set both bands and rows, or neither (derived from threshold)")
        if self.bands is not None and (
            self.bands < 1 or self.rows < 1 or self.bands * self.rows > self.num_perm
        ):
            raise ValueError(
                f"bands*rows must be in [1, num_perm={self.num_perm}], got {self.bands}x{self.rows}"
            )
        if self.ngram < 1 or (self.ngram_words is not None and self.ngram_words < 1):
            raise ValueError(f"ngram sizes must be >= 1, got {self.ngram}, {self.ngram_words}")
        if self.bits != 64:
            raise ValueError(f"bits {self.bits}; valid: 64")
        blocks = self.simhash_blocks if self.simhash_blocks is not None else self.max_hamming + 2
        if not 0 <= self.max_hamming < max(blocks, self.max_hamming + 1) <= 64:
            raise ValueError(
                f"need 0 <= max_hamming < simhash_blocks <= 64, got {self.max_hamming}, {blocks}"
            )
        if self.index_shards is not None and self.index_shards < 1:
            raise ValueError(f"index_shards must be >= 1, got {self.index_shards}")
        if self.max_chars < 1 or self.max_shingles < 1:
            raise ValueError("max_chars and max_shingles must be >= 1")


class Dedup(BarrierOp):
    """Drop near-duplicates, keeping one representative per cluster."""

    name = "dedup"
    planner = "dataforge.runtime.barriers.dedup:plan"
    Config = DedupConfig

    def setup(self) -> None:
        self._jieba = None
        if self.config.shingle == "jieba":
            import rjieba  # heavy-ish; loaded once per actor

            self._jieba = rjieba

    # -- parameters shared with the planner ------------------------------------------------

    @property
    def signature_column(self) -> str:
        return SIGNATURE_COLUMNS[self.config.method]

    def bands_rows(self) -> tuple[int, int]:
        """MinHash ``(bands, rows)``: configured, or derived from ``threshold``."""
        if self.config.bands is not None:
            return self.config.bands, self.config.rows
        return optimal_bands(
            self.config.threshold, self.config.num_perm, max_bands=MAX_DERIVED_BANDS
        )

    def simhash_block_count(self) -> int:
        cfg = self.config
        return cfg.simhash_blocks if cfg.simhash_blocks is not None else cfg.max_hamming + 2

    def signature_params(self) -> dict[str, Any]:
        """Everything that changes signature values; published with them so that a later
        run can refuse to dedup against incompatible signatures."""
        cfg = self.config
        params: dict[str, Any] = {
            "method": cfg.method,
            "shingle": cfg.shingle,
            "ngram": cfg.ngram,
            "ngram_words": cfg.ngram_words,
            "lowercase": cfg.lowercase,
            "nfkc": cfg.nfkc,
            "strip_punctuation": cfg.strip_punctuation,
            "hash_seed": cfg.hash_seed,
            "max_chars": cfg.max_chars,
            "max_shingles": cfg.max_shingles,
        }
        if cfg.method == "minhash":
            params.update(num_perm=cfg.num_perm, engine=_engine_version(cfg.engine))
        elif cfg.method == "simhash":
            params.update(bits=cfg.bits, weighting=cfg.weighting)
        return params

    def validate(self) -> list[str]:
        problems = []
        for path in self.config.against:
            base = Path(self.context.base_dir) / path
            if not (base / "dedup" / "signatures.parquet").is_file():
                problems.append(f"dedup.against: {base}/dedup/signatures.parquet not found")
        if self.config.engine == "rensa" and self.config.method == "minhash":
            try:
                import rensa  # noqa: F401
            except ImportError:
                problems.append("dedup.engine: rensa is not installed (or use engine: numpy)")
        return problems

    # -- before the barrier ----------------------------------------------------------------

    def prepare(self, batch: pa.Table) -> pa.Table:
        """Add the signature column (null for texts that normalize to nothing)."""
        if batch.num_rows == 0:
            return batch.append_column(self.signature_column, self._empty_signatures(0))
        langs = batch.column("lang").to_numpy(zero_copy_only=False)
        kinds = np.array(
            [shingle_kind_for(self.config.shingle, str(g)) for g in langs], dtype=object
        )
        if self.config.method == "exact":
            kinds[:] = "exact"
        n = batch.num_rows
        parts: list[tuple[np.ndarray, Any]] = []
        for kind in sorted(set(kinds.tolist())):
            idx = np.flatnonzero(kinds == kind)
            texts = batch.column("text").take(pa.array(idx)).combine_chunks()
            parts.append((idx, self._signatures(texts, kind)))
        return batch.append_column(self.signature_column, self._assemble(parts, n))

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

    def shingles(self, texts: pa.Array, kind: str) -> ShingleSet:
        """Shingle hashes of the texts for one shingle kind."""
        cfg = self.config
        points = self._normalized(texts, kind)
        as_words = kind in ("word", "jieba")
        n = cfg.ngram_words if as_words and cfg.ngram_words is not None else cfg.ngram
        return shingle_hashes(
            points, "word" if as_words else "char", n, max_shingles=cfg.max_shingles
        )

    def _signatures(self, texts: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, valid) for one kind group."""
        cfg = self.config
        if kind == "exact":
            points = self._normalized(texts, "char")
            return exact_hashes(points), np.diff(points[1]) > 0
        shingles = self.shingles(texts, kind)
        valid = shingles.counts > 0
        if cfg.method == "simhash":
            return simhash_fingerprints(shingles, cfg.weighting), valid
        return self._minhash(shingles), valid

    def _minhash(self, shingles: ShingleSet) -> np.ndarray:
        cfg = self.config
        if cfg.engine == "numpy":
            return minhash_signatures(shingles, cfg.num_perm, cfg.hash_seed)
        import rensa

        matrix = rensa.RMinHash.digest_matrix_from_flat_token_hashes(
            shingles.hashes, shingles.offsets.astype(np.uint64), cfg.num_perm, cfg.hash_seed
        )
        # array.array over the flattened rows is ~2x faster than np.array(list of lists).
        flat = array.array("I", itertools.chain.from_iterable(matrix.to_rows()))
        return np.frombuffer(flat, dtype=np.uint32).reshape(-1, cfg.num_perm)

    def _signature_type(self) -> pa.DataType:
        if self.config.method == "minhash":
            return pa.binary(4 * self.config.num_perm)
        return pa.uint64()

    def _empty_signatures(self, n: int) -> pa.Array:
        return pa.nulls(n, self._signature_type())

    def _assemble(self, parts: list[tuple[np.ndarray, Any]], n: int) -> pa.Array:
        """Scatter per-kind signatures back into row order, null where not valid."""
        valid = np.zeros(n, dtype=bool)
        if self.config.method == "minhash":
            values = np.zeros((n, self.config.num_perm), dtype=np.uint32)
        else:
            values = np.zeros(n, dtype=np.uint64)
        for idx, (vals, ok) in parts:
            values[idx] = vals
            valid[idx] = ok
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
        data = pa.py_buffer(np.ascontiguousarray(values).tobytes())
        null_count = int(n - valid.sum())
        return pa.Array.from_buffers(self._signature_type(), n, [bitmap, data], null_count)

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


def _engine_version(engine: str) -> str:
    if engine == "rensa":
        import rensa

        return f"rensa-alg{rensa.RMinHash.ALGORITHM_VERSION}"
    return "numpy-v1"
