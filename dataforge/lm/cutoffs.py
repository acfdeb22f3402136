"""CCNet perplexity buckets: ``head`` / ``middle`` / ``tail`` by per-language cutoffs.

CCNet computes, per language, the perplexity percentiles (30th and 60th by default) of a
sample of the crawl, then labels a document ``head`` if its perplexity is below the first
cutoff, ``middle`` below the second, else ``tail``. Our sample is the ``sample_size``
documents with the smallest id hashes, so it is the same whatever the file order.
"""

from __future__ import annotations

import heapq

import numpy as np

from dataforge.lm.corpus import id_hash_percent, read_documents
from dataforge.lm.score import PerplexityScorer

__all__ = ["BUCKETS", "assign_buckets", "deterministic_sample", "estimate_cutoffs"]

BUCKETS = ("head", "middle", "tail")


def assign_buckets(ppl: np.ndarray, head_max: float, middle_max: float) -> np.ndarray:
    """Bucket names per perplexity (``""`` for NaN): ``ppl < head_max`` is head, ``ppl <
    middle_max`` middle, else tail (CCNet's ``PerplexityBucket``)."""
    ppl = np.asarray(ppl, np.float64)
    out = np.where(ppl < head_max, "head", np.where(ppl < middle_max, "middle", "tail")).astype(
        object
    )
    out[np.isnan(ppl)] = ""
    return out


def deterministic_sample(
    pattern: str, sample_size: int, *, text_key: str = "text", id_key: str | None = "id"
) -> list[str]:
    """Texts of the ``sample_size`` documents under ``pattern`` with the smallest id hashes."""
    heap: list[tuple[float, str, str]] = []  # max-heap on hash via negation
    for batch in read_documents(pattern, text_key=text_key, id_key=id_key):
        ids = batch.column("id").to_pylist()
        hashes = id_hash_percent(ids)
        texts = batch.column("text").to_pylist()
        for h, doc_id, text in zip(hashes.tolist(), ids, texts, strict=True):
            item = (-h, doc_id, text)
            if len(heap) < sample_size:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    return [text for _, _, text in sorted(heap, reverse=True)]


def estimate_cutoffs(
    scorer: PerplexityScorer,
    pattern: str,
    percentiles: tuple[float, float] = (30.0, 60.0),
    sample_size: int = 2000,
) -> tuple[float, float]:
    """Perplexity at ``percentiles`` over a deterministic sample of ``pattern``.

    Raises:
        ValueError: the sample has no scorable (non-empty) document.
    """
    ppl = scorer.score_documents(deterministic_sample(pattern, sample_size)).ppl
    ppl = ppl[~np.isnan(ppl)]
    if ppl.size == 0:
        raise ValueError(f"no non-empty document in {pattern!r} to estimate perplexity cutoffs")
    head, middle = np.percentile(ppl, list(percentiles))
    return float(head), float(middle)
