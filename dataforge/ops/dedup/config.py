"""Settings of the ``dedup`` stage: generic keys at the top, each method's own in its block.

YAML maps 1:1 onto these frozen dataclasses::

    - op: dedup
      method: minhash            # exact, minhash, simhash
      threshold: 0.4             # generic: method, threshold, shingling, normalization, keep
      minhash: {num_perm: 128}   # read by dataforge.ops.dedup.minhash only
      verify: {max_partners: 16} # the candidate check of minhash and simhash

A block is read by one party: ``minhash`` by :mod:`dataforge.ops.dedup.minhash`,
``simhash`` by :mod:`dataforge.ops.dedup.simhash`, ``verify`` by the check of candidate
pairs (:mod:`~dataforge.ops.dedup.verify`, :mod:`~dataforge.ops.dedup.template`,
:mod:`~dataforge.ops.dedup.index`). A block changed from its defaults for a method that does
not read it is refused, so no setting sits where nothing reads it. The flat keys of earlier
versions are refused with their new place (:data:`MOVED_KEYS`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from dataforge.ops.dedup.registry import METHODS
from dataforge.typed_config import check_choices, check_range

__all__ = [
    "MOVED_KEYS",
    "DedupConfig",
    "KeepConfig",
    "MinHashConfig",
    "NormalizeConfig",
    "SimHashConfig",
    "VerifyConfig",
]


@dataclasses.dataclass(frozen=True)
class NormalizeConfig:
    """Script normalization before shingling (on top of NFKC, lowercase, punctuation)."""

    t2s: bool = False
    """Convert traditional to simplified Chinese (OpenCC ``t2s``) so that a traditional
    and a simplified copy of one text are duplicates."""


@dataclasses.dataclass(frozen=True)
class KeepConfig:
    """Which member of a duplicate cluster survives."""

    prefer_source: tuple[str, ...] = ()
    """Sources in order of preference; the rest rank after them. Ties: lowest id."""


@dataclasses.dataclass(frozen=True)
class MinHashConfig:
    """MinHash signatures and their LSH bands (``method: minhash``)."""

    num_perm: int = 128
    """Permutations: values per signature (4 bytes each)."""
    bands: int | None = None
    """LSH bands; with ``rows``, overrides the derivation from ``threshold``."""
    rows: int | None = None
    """Signature values per band (set with ``bands``)."""
    engine: Literal["rensa", "numpy"] = "rensa"
    """MinHash engine over our shingle hashes: ``rensa`` (Rust, measured faster) or numpy."""
    hash_seed: int = 0
    """Seed of the hash permutations (fixed, not the pipeline seed, so that runs with
    different pipeline seeds can dedup against each other)."""

    def __post_init__(self) -> None:
        check_choices(self)
        check_range("minhash.num_perm", self.num_perm, 1, 1024)
        if (self.bands is None) != (self.rows is None):
            raise ValueError(
                "set both minhash.bands and minhash.rows, or neither (derived from threshold)"
            )
        if self.bands is None:
            return
        check_range("minhash.bands", self.bands, 1)
        check_range("minhash.rows", self.rows, 1)
        if self.bands * self.rows > self.num_perm:
            raise ValueError(
                f"minhash.bands * minhash.rows = {self.bands}x{self.rows} exceeds "
                f"minhash.num_perm={self.num_perm}"
            )


@dataclasses.dataclass(frozen=True)
class SimHashConfig:
    """SimHash fingerprints and their permuted-block tables (``method: simhash``)."""

    bits: int = 64
    """Fingerprint width (64 is the only one)."""
    max_hamming: int = 6
    """Fingerprints within this Hamming distance are candidates (6 measured best at
    precision 1.0 in benchmarks/dedup_quality.py; 3 finds little beyond exact copies)."""
    blocks: int | None = None
    """Blocks per fingerprint of the permuted-block tables (default ``max_hamming + 2``:
    ``C(k + 2, 2)`` tables keyed by 2 blocks, i.e. 28 tables with 16-bit keys for k=6)."""
    weighting: Literal["tf", "log_tf", "binary"] = "tf"
    """Feature weight: term frequency, 1 + ln(tf), or 1."""

    def __post_init__(self) -> None:
        check_choices(self)
        if self.bits != 64:
            raise ValueError(f"simhash.bits={self.bits!r}; valid: 64")
        check_range("simhash.max_hamming", self.max_hamming, 0, 63)
        # Tables keyed by blocks - max_hamming of the blocks: at least one block per key.
        if not self.max_hamming < self.block_count() <= 64:
            shown = "" if self.blocks is not None else " (default: simhash.max_hamming + 2)"
            raise ValueError(
                f"simhash.blocks={self.block_count()}{shown}; valid range: "
                f"simhash.max_hamming + 1 = {self.max_hamming + 1} to 64"
            )

    def block_count(self) -> int:
        """``blocks``, or its default for ``max_hamming``."""
        return self.blocks if self.blocks is not None else self.max_hamming + 2


@dataclasses.dataclass(frozen=True)
class VerifyConfig:
    """How candidate pairs are checked on their texts (``minhash`` and ``simhash``)."""

    block: int = 20
    """Word-shingled texts: a run of this many consecutive character 8-grams that the
    other document lacks is content of its own (scattered edits leave shorter runs)."""
    char_block: int = 9
    """Character-shingled texts (Chinese, Japanese, Korean; and jieba): a run of this many
    consecutive character 3-grams the other document lacks (7 characters of its own) is
    content of its own: what a short line of a manual page, a spec sheet or a post has,
    and what scattered edits of a copy rarely leave (chosen on template families in
    benchmarks/dedup_quality.py)."""
    max_own: float = 0.05
    """Word-shingled texts: a pair is a duplicate only when one of the two has at most
    this share of own content (two pages of one template each have their own body)."""
    char_max_own: float = 0.02
    """``max_own`` of character-shingled texts (chosen with ``char_block`` on template
    families in benchmarks/dedup_quality.py)."""
    template_docs: int = 5
    """Character-shingled texts: a 3-gram in at least this many candidate documents is
    template; pairs are verified on the rest, each side's residue
    (:mod:`dataforge.ops.dedup.template`; the rule chosen in benchmarks/dedup_quality.py).
    0: no template rule."""
    template_run: int = 4
    """A residue: runs of at least this many non-template 3-grams."""
    residue_max_own: float = 0.1
    """A pair is a duplicate when one side has at most this share of its residue in runs
    of ``char_block`` 3-grams the other lacks..."""
    residue_min_shared: float = 0.2
    """...and at least this share of its residue in the other."""
    min_residue: int = 10
    """Residue 3-grams both sides need for the rule (else the whole-text rule)."""
    max_partners: int = 16
    """In one bucket, each document is paired with up to this many members before it
    (all pairs of buckets up to ``max_partners + 1``; star-shaped beyond)."""

    def __post_init__(self) -> None:
        for key in ("block", "char_block", "template_run", "max_partners"):
            check_range(f"verify.{key}", getattr(self, key), 1)
        for key in ("template_docs", "min_residue"):
            check_range(f"verify.{key}", getattr(self, key), 0)
        for key in ("max_own", "char_max_own", "residue_max_own", "residue_min_shared"):
            check_range(f"verify.{key}", getattr(self, key), 0.0, 1.0)


METHOD_BLOCKS = ("minhash", "simhash")
"""Blocks read by the method of their name only."""
_DEFAULTS = {"minhash": MinHashConfig(), "simhash": SimHashConfig(), "verify": VerifyConfig()}


MOVED_KEYS = {
    **{key: f"minhash.{key}" for key in ("num_perm", "bands", "rows", "engine", "hash_seed")},
    **{key: f"simhash.{key}" for key in ("bits", "max_hamming", "weighting")},
    "simhash_blocks": "simhash.blocks",
    **{
        key: f"verify.{key}"
        for key in (
            "block", "char_block", "max_own", "char_max_own", "template_docs", "template_run",
            "residue_max_own", "residue_min_shared", "min_residue", "max_partners",
        )
    },
}  # fmt: skip
"""The flat keys of earlier versions -> their key path now; loading refuses them so."""


@dataclasses.dataclass(frozen=True)
class DedupConfig:
    """The ``dedup`` stage: generic keys here, each method's own in its block."""

    method: str = "minhash"
    """One of :data:`dataforge.ops.dedup.registry.METHODS`: exact, minhash, simhash."""
    threshold: float = 0.4
    """Jaccard of the shingle sets from which two documents are duplicates: every
    candidate pair of MinHash and SimHash is checked against it on the texts, and MinHash
    banding is tuned for it (chosen across domains in benchmarks/dedup_quality.py)."""
    shingle: Literal["auto", "char", "word", "jieba"] = "auto"
    """``auto``: characters for zh/ja/ko, words otherwise; ``jieba``: jieba words."""
    ngram: int = 2
    """Shingle size: characters (``char``) or words (``word``, ``jieba``). Character
    2-grams keep a 20%-edited Chinese text above the threshold (3-grams: half of them)."""
    ngram_words: int | None = 2
    """Word n-gram size for word/jieba shingles; None uses ``ngram`` for them too."""
    lowercase: bool = True
    """Lowercase before shingling."""
    nfkc: bool = True
    """Unicode NFKC before shingling (full-width forms equal their ASCII)."""
    strip_punctuation: bool = True
    """Remove punctuation, symbols and whitespace runs before shingling (word shingles
    keep one space between words)."""
    max_chars: int = 1_000_000
    """Normalized characters shingled per document (bounded work for huge documents)."""
    max_shingles: int = 20_000
    """Shingles per document; more keep a consistent bottom-k sample."""
    normalize: NormalizeConfig = NormalizeConfig()
    """Script normalization."""
    keep: KeepConfig = KeepConfig()
    """Which member of a cluster survives."""
    against: tuple[str, ...] = ()
    """Previous run directories (OUT) whose published signatures new records are checked
    against; a new record that duplicates one of them is dropped."""
    index_shards: int | None = None
    """Index actors (default: the cluster's CPUs)."""
    minhash: MinHashConfig = MinHashConfig()
    """``method: minhash`` only."""
    simhash: SimHashConfig = SimHashConfig()
    """``method: simhash`` only."""
    verify: VerifyConfig = VerifyConfig()
    """The check of candidate pairs on their texts (``minhash`` and ``simhash``)."""

    moved_keys: ClassVar[dict[str, str]] = MOVED_KEYS
    """Flat keys of earlier versions -> their key path now (refused when loading)."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            valid = ", ".join(repr(m) for m in METHODS)
            raise ValueError(f"method={self.method!r}; valid: {valid}")
        check_choices(self)
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold={self.threshold!r}; valid range: 0 to 1, both excluded")
        check_range("ngram", self.ngram, 1)
        check_range("ngram_words", self.ngram_words, 1)
        check_range("index_shards", self.index_shards, 1)
        check_range("max_chars", self.max_chars, 1)
        check_range("max_shingles", self.max_shingles, 1)
        self._refuse_unread_blocks()

    def _refuse_unread_blocks(self) -> None:
        """A block changed from its defaults must be read by the method that runs."""
        for block in METHOD_BLOCKS:
            if block != self.method and getattr(self, block) != _DEFAULTS[block]:
                raise ValueError(
                    f"{block}: read by method {block} only; this stage has method {self.method}"
                )
        if not METHODS[self.method].verified and self.verify != _DEFAULTS["verify"]:
            verified = ", ".join(name for name, cls in METHODS.items() if cls.verified)
            raise ValueError(
                f"verify: read by the candidate check of methods {verified} only; this stage "
                f"has method {self.method}, which checks no candidates"
            )
