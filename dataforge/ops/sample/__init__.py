"""Temperature sampling across sources: a barrier stage that rebalances the mixture.

Sizes ``n_i`` (in ``unit``: tokens, docs or chars) become target shares

    p_i = w_i * n_i ** alpha / sum_j (w_j * n_j ** alpha)        (alpha = 1 / temperature)

and each source is down- or upsampled to ``p_i * target`` units. ``alpha < 1`` flattens the
mixture toward small sources; ``alpha = 1`` keeps the natural proportions ``q_i = n_i / N``.
Upsampling repeats a source at most ``max_epochs`` times; a capped source's shortfall is
redistributed over the uncapped ones (water-filling).

Selection is a pure function of (seed, id): ``prepare`` stores a keyed hash per document,
and the planner (:mod:`dataforge.ops.sample.planner`) keeps the documents with the
smallest hashes until a source's target is reached, so the outcome does not depend on
order, batching or the number of actors. ``apply`` turns the planner's per-document copy
counts into drops (reason ``sample``) and repeated copies (``_copy >= 1``, id ``<id>#r<k>``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.base import BarrierOp
from dataforge.records import DROP, ORD

__all__ = [
    "COPIES",
    "COPY",
    "HASH",
    "UNITS",
    "MixturePlan",
    "Sample",
    "SourceMix",
    "check_pipeline",
    "keyed_hashes",
    "mixture_plan",
    "stream_proportions",
]

UNITS = "_units"
HASH = "_hash"
COPY = "_copy"
COPIES = "copies"
"""Decision column: 0 = drop, 1 = keep, k > 1 = keep plus k - 1 repeated copies."""

DROP_REASON = "sample"
UNIT_CHOICES = ("tokens", "docs", "chars")


class Sample(BarrierOp):
    """Temperature sampling (see the module docstring)."""

    name: ClassVar[str] = "sample"

    @dataclasses.dataclass(frozen=True)
    class Config:
        alpha: float | None = None
        """Exponent on source sizes (1/temperature); default 1.0 when neither is given."""
        temperature: float | None = None
        """Alternative spelling: alpha = 1 / temperature. Giving both is an error."""
        unit: Literal["tokens", "docs", "chars"] = "chars"
        """What sizes and targets count. ``tokens`` needs a tokenize stage earlier."""
        target: int | None = None
        """Total units to emit. Exactly one of ``target`` and ``keep_total``."""
        keep_total: bool = False
        """Emit as many units as there are before the stage (re-mix, same size)."""
        weights: dict[str, float] = dataclasses.field(default_factory=dict)
        """Per-source multipliers applied before normalization (missing sources: 1.0)."""
        max_epochs: float | None = 4.0
        """Most times one source may be repeated when upsampled (>= 1); null: no cap."""
        seed: int | None = None
        """Key of the selection hash; default: the pipeline seed."""

        def __post_init__(self) -> None:
            if self.alpha is not None and self.temperature is not None:
                raise ValueError(
                    "give either alpha or temperature (alpha = 1/temperature), not both"
                )
            if self.alpha is not None and not (math.isfinite(self.alpha) and self.alpha >= 0):
                raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}")
            if self.temperature is not None and not (
                math.isfinite(self.temperature) and self.temperature > 0
            ):
                raise ValueError(
                    f"temperature must be a finite number > 0, got {self.temperature!r}"
                )
            if self.unit not in UNIT_CHOICES:
                raise ValueError(f"unit {self.unit!r}; valid: {', '.join(UNIT_CHOICES)}")
            if (self.target is None) == (not self.keep_total):
                raise ValueError("give exactly one of target (total units) and keep_total: true")
            if self.target is not None and self.target < 1:
                raise ValueError(f"target must be a positive integer, got {self.target!r}")
            for source, weight in self.weights.items():
                if not (math.isfinite(weight) and weight >= 0):
                    raise ValueError(
                        f"weights.{source} must be a finite number >= 0, got {weight!r}"
                    )
            if self.max_epochs is not None and not (
                math.isfinite(self.max_epochs) and self.max_epochs >= 1
            ):
                raise ValueError(
                    f"max_epochs must be >= 1 (or null: no cap), got {self.max_epochs!r}"
                )

        @property
        def effective_alpha(self) -> float:
            if self.temperature is not None:
                return 1.0 / self.temperature
            return 1.0 if self.alpha is None else self.alpha

    @property
    def seed(self) -> int:
        """The hash key: the op's own seed, else the pipeline seed."""
        return self.context.seed if self.config.seed is None else self.config.seed

    def validate(self) -> list[str]:
        problems = []
        sources = self.context.sources
        unknown = sorted(set(self.config.weights) - set(sources)) if sources else []
        if unknown:
            problems.append(f"weights for unknown source(s) {unknown}; sources: {list(sources)}")
        elif sources and all(self.config.weights.get(s, 1.0) == 0 for s in sources):
            problems.append("every source has weight 0, so nothing could be sampled")
        return problems

    def check_pipeline(self, stages: Sequence[Any], index: int) -> list[str]:
        return check_pipeline(stages, index)

    def prepare(self, batch: pa.Table) -> pa.Table:
        """Add ``_units`` (int64, the document's size in ``unit``) and ``_hash`` (uint64)."""
        units = document_units(batch, self.config.unit)
        hashes = keyed_hashes(batch.column("id").to_pylist(), self.seed)
        for name, values in ((UNITS, units), (HASH, hashes)):
            if name in batch.column_names:
                batch = batch.drop_columns([name])
            batch = batch.append_column(name, values)
        return batch

    def plan(self, ctx: BarrierContext) -> dict[str, Any]:
        """The global decision over all prepared parts (:mod:`dataforge.ops.sample.planner`)."""
        from dataforge.ops.sample.planner import plan  # deferred: it imports this module

        return plan(self, ctx)

    def apply(self, batch: pa.Table, decision: pa.Table | None) -> pa.Table:
        """Drop (reason ``sample``) and repeat rows as ``decision`` (``_ord``, ``copies``) says.

        Rows absent from the decision are kept once; decision rows for ``_ord`` values not in
        this batch are ignored, so a task's decision may be applied batch by batch.
        Repeated copies are appended after the originals, in row order, with ``_copy = k``
        and id ``<id>#r<k>``; originals get ``_copy = 0``.
        """
        copies = np.ones(batch.num_rows, dtype=np.int64)
        if decision is not None and decision.num_rows:
            ords = batch.column(ORD).to_numpy()
            dec_ords = decision.column(ORD).to_numpy()
            pos = pc.fill_null(pc.index_in(pa.array(ords), value_set=pa.array(dec_ords)), -1)
            pos = pos.to_numpy()
            hit = pos >= 0
            copies[hit] = decision.column(COPIES).to_numpy()[pos[hit]]
        live = batch.column(DROP).is_null().to_numpy(zero_copy_only=False)
        copies[~live] = 1  # rows dropped earlier keep their reason and are never repeated
        if np.any(copies < 0):
            raise ValueError(f"sample decision has negative copies: {copies[copies < 0][:5]}")
        drops = pc.if_else(pa.array(copies == 0), pa.scalar(DROP_REASON), batch.column(DROP))
        out = batch.set_column(batch.schema.get_field_index(DROP), DROP, drops)
        if COPY in out.column_names:  # an earlier sample stage's copies stay copies
            out = _with_column(out, COPY, pc.fill_null(out.column(COPY), 0).cast(pa.int64()))
        else:
            out = out.append_column(COPY, pa.array(np.zeros(out.num_rows, dtype=np.int64)))
        extra = np.maximum(copies - 1, 0)
        if not extra.any():
            return out
        rows = np.repeat(np.arange(out.num_rows), extra)
        # k-th repeat of a row: 1..extra[row], in row order
        k = np.arange(len(rows)) - np.repeat(np.cumsum(extra) - extra, extra) + 1
        repeats = out.take(rows)
        suffix = pc.cast(pa.array(k, pa.int64()), pa.string())
        repeats = _with_column(
            repeats, "id", pc.binary_join_element_wise(repeats.column("id"), suffix, "#r")
        )
        repeats = _with_column(repeats, COPY, pa.array(k, pa.int64()))
        return pa.concat_tables([out, repeats])


def _with_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    if name in table.column_names:
        return table.set_column(table.schema.get_field_index(name), name, values)
    return table.append_column(name, values)


def document_units(batch: pa.Table, unit: str) -> pa.Array:
    """Each row's size in ``unit`` (int64): 1 per doc, Unicode code points, or ``num_tokens``."""
    if unit == "docs":
        return pa.array(np.ones(batch.num_rows, dtype=np.int64))
    if unit == "chars":
        return (
            pc.fill_null(pc.utf8_length(batch.column("text")), 0).cast(pa.int64()).combine_chunks()
        )
    if unit == "tokens":
        if "num_tokens" not in batch.column_names:
            raise ValueError(
                "sample unit: tokens needs the num_tokens column of a tokenize stage before it"
            )
        tokens = batch.column("num_tokens")
        if tokens.null_count:
            raise ValueError(
                f"sample unit: tokens found {tokens.null_count} live rows without num_tokens"
            )
        return tokens.cast(pa.int64()).combine_chunks()
    raise ValueError(f"unit {unit!r}; valid: {', '.join(UNIT_CHOICES)}")


def keyed_hashes(ids: Sequence[str], seed: int) -> pa.Array:
    """xxhash64 of each id keyed by ``seed`` (uint64): the selection order of the documents."""
    key = seed & 0xFFFF_FFFF_FFFF_FFFF
    # xxhash has no batch API; one C call per id is the cheapest option available.
    values = np.fromiter(
        (xxhash.xxh64_intdigest(i.encode("utf-8"), key) for i in ids),
        dtype=np.uint64,
        count=len(ids),
    )
    return pa.array(values, pa.uint64())


@dataclasses.dataclass(frozen=True)
class SourceMix:
    """One source in a mixture plan.

    Attributes:
        units: size n_i before sampling.
        share: natural share q_i = n_i / sum n.
        target_share: p_i from the formula, before any cap.
        target_units: units to emit after caps and redistribution.
        capped: whether ``max_epochs`` bounded this source.
    """

    units: int
    share: float
    target_share: float
    target_units: float
    capped: bool


@dataclasses.dataclass(frozen=True)
class MixturePlan:
    """Targets per source; ``shortfall`` is what no source could absorb (all capped)."""

    sources: dict[str, SourceMix]
    requested: float
    shortfall: float


def mixture_plan(
    sizes: Mapping[str, int],
    alpha: float,
    total: float,
    weights: Mapping[str, float] | None = None,
    max_epochs: float | None = None,
) -> MixturePlan:
    """Target units per source: p_i = w_i n_i^alpha / sum_j w_j n_j^alpha, times ``total``,
    with repetition capped at ``max_epochs`` and the excess water-filled over the others.

    An empty source (n_i = 0) gets p_i = 0, whatever alpha (0 ** 0 would otherwise be 1).
    Example: sizes {a: 9M, b: 1M}, alpha 0.5 -> p = {a: 0.75, b: 0.25}.
    """
    weights = weights or {}
    names = list(sizes)
    n = np.array([sizes[s] for s in names], dtype=np.float64)
    w = np.array([weights.get(s, 1.0) for s in names], dtype=np.float64)
    eligible = (n > 0) & (w > 0)
    raw = np.zeros_like(n)
    if eligible.any():
        # normalize by the largest size first so large alphas do not overflow
        raw[eligible] = w[eligible] * (n[eligible] / n[eligible].max()) ** alpha
    p = raw / raw.sum() if raw.sum() > 0 else raw
    cap = n * max_epochs if max_epochs is not None else np.full_like(n, np.inf)
    targets = p * total
    capped = np.zeros(len(names), dtype=bool)
    while True:
        over = ~capped & (targets > cap)
        if not over.any():
            break
        capped |= over
        targets[capped] = cap[capped]
        free = ~capped & (p > 0)
        left = total - targets[capped].sum()
        if free.any():
            targets[free] = left * p[free] / p[free].sum()
    shortfall = max(0.0, total - float(targets.sum()))
    q = n / n.sum() if n.sum() > 0 else n
    return MixturePlan(
        sources={
            s: SourceMix(
                int(sizes[s]), float(q[i]), float(p[i]), float(targets[i]), bool(capped[i])
            )
            for i, s in enumerate(names)
        },
        requested=float(total),
        shortfall=shortfall,
    )


def check_pipeline(stages: Sequence[Any], index: int) -> list[str]:
    """Problems of the sample stage ``stages[index]`` that depend on the other stages.

    ``unit: tokens`` needs a tokenize stage before it (tokenize writes ``num_tokens``).
    ``stages`` are ``dataforge.config.StageConfig`` (``.op`` name, ``.params`` Config);
    messages carry no stage prefix (``dataforge validate`` adds ``stages[i] (sample):``).
    """
    stage = stages[index]
    if getattr(stage.params, "unit", None) != "tokens":
        return []
    if any(s.op == "tokenize" for s in stages[:index]):
        return []
    later = [i for i, s in enumerate(stages) if s.op == "tokenize" and i > index]
    hint = f" (stages[{later[0]}] tokenize runs after it)" if later else ""
    return [
        f"unit: tokens needs a tokenize stage earlier in the pipeline{hint}; "
        "move tokenize before sample or use unit: chars or docs"
    ]


def stream_proportions(samples_by_source: Mapping[str, int]) -> list[dict[str, Any]]:
    """``streams`` entries for a manifest written with ``output.split_by_source: true``,
    from the samples written per source (documents, repeats included: ``kept + repeated``
    of the run's counts, or the sample summary's ``output_docs`` when no later stage drops).

    ``proportion`` is each source's share of the written samples:
    ``streaming.Stream(proportion=...)`` counts samples, so these values reproduce the
    sampled mixture exactly; scale them to re-weight at load time. Sources that wrote no
    samples have no sub-dataset and are left out.
    """
    written = {s: int(n) for s, n in samples_by_source.items() if n > 0}
    total = sum(written.values())
    return [{"source": s, "path": f"mds/{s}", "proportion": n / total} for s, n in written.items()]
