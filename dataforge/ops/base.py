"""The Op protocol, the registry (YAML name -> class) and drop-reason bookkeeping.

An op is a class with a nested frozen ``Config`` dataclass, ``setup()`` for heavy state
(dictionaries, models), and ``__call__(batch) -> batch`` over a ``pyarrow.Table`` in the
schema of :mod:`dataforge.records`. Ops never import ray: the runtime decides where they run.

Three kinds:

* :class:`Mapper` rewrites live records (``transform``); dropped rows pass untouched.
* :class:`Filter` returns one drop reason (or ``None`` to keep) per live record
  (``drop_reasons``); the base class writes them into the ``drop`` column.
* :class:`BarrierOp` needs the whole dataset (dedup, sample). It contributes a per-batch
  ``prepare`` (runs in the actor pool before the barrier), a global ``plan(ctx)`` that the
  runtime runs once on one worker, and a per-batch ``apply`` (runs in the actor pool after
  the barrier).
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.records import DROP, live_mask

if TYPE_CHECKING:
    from dataforge.ops.barrier import BarrierContext

__all__ = [
    "BarrierOp",
    "Filter",
    "Mapper",
    "Op",
    "OP_REGISTRY",
    "OpContext",
    "op_class",
    "set_drop_reasons",
]


@dataclasses.dataclass(frozen=True)
class OpContext:
    """What an op may know about the run besides its own config.

    Attributes:
        seed: the pipeline seed (ops derive their own seeds from it).
        sources: source name -> language code, in YAML order.
        base_dir: directory that relative model/tokenizer paths resolve against.
        record_langs: the languages a record can carry when it reaches this op, set when
            an earlier ``lang_id`` stage decides them (its ``keep`` list; ``("*",)`` when
            it keeps every language); None: each record has its source's language.
    """

    seed: int = 0
    sources: dict[str, str] = dataclasses.field(default_factory=dict)
    base_dir: str = "."
    record_langs: tuple[str, ...] | None = None

    def locate(self, path: str) -> str:
        """A model/tokenizer path from the config: a URI unchanged, a local path resolved
        against ``base_dir``."""
        if "://" in path:
            return path
        p = Path(path).expanduser()
        return str(p if p.is_absolute() else Path(self.base_dir) / p)

    def local_path(self, path: str, companions: tuple[str, ...] = ()) -> Path:
        """:meth:`locate`, then for a URI a copy in this node's cache (fetched once, with the
        files named ``<path><suffix>`` for each suffix in ``companions``)."""
        from dataforge.io.node_cache import fetch_to_cache

        return fetch_to_cache(self.locate(path), companions)


class Op:
    """Base class of all ops. Subclasses set ``name`` and a nested frozen ``Config``."""

    name: ClassVar[str] = ""
    observed_as: ClassVar[str | None] = None
    """A distribution the runtime fills from this op's output (``runtime.histograms``):
    ``"ppl"`` (the scores in ``meta.ppl``) or ``"chars_extracted"`` (text length once
    pages became main text); None for none."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        """No parameters (ops with parameters define their own)."""

    def __init__(self, config: Any, context: OpContext | None = None) -> None:
        self.config = config
        self.context = context or OpContext()
        self.events: Counter[str] = Counter()
        """Counts of changes that kept the record (``convert:t2s``...); the runtime sums
        them per task into the manifest's ``counts.by_source.<name>.events``."""

    def setup(self) -> None:
        """Load heavy state once per actor. Default: nothing to load."""

    def __call__(self, batch: pa.Table) -> pa.Table:  # pragma: no cover - abstract
        raise NotImplementedError

    def mds_encodings(self) -> dict[str, str]:
        """MDS encodings of the columns this op adds (e.g. ``{"tokens": "ndarray:uint16"}``)."""
        return {}

    def validate(self) -> list[str]:
        """Problems that make the op unusable (missing model files, ...), for
        ``dataforge validate``. Runs without ray and without ``setup()``."""
        return []

    def check_pipeline(self, stages: Sequence[Any], index: int) -> list[str]:
        """Problems of this op as stage ``stages[index]`` that depend on the other stages
        (e.g. a column an earlier stage must add), for ``dataforge validate``.

        ``stages`` are ``dataforge.config.StageConfig`` (``.op`` name, ``.params`` Config);
        messages carry no stage prefix (validation adds ``stages[i] (<op>):``).
        """
        return []


class Mapper(Op):
    """An op that rewrites live records; subclasses implement :meth:`transform`."""

    def transform(self, live: pa.Table) -> pa.Table:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, batch: pa.Table) -> pa.Table:
        mask = live_mask(batch)
        if pc.all(mask).as_py() in (True, None):
            return self.transform(batch)
        live_idx = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        out = self.transform(batch.take(live_idx))
        return _scatter(batch, live_idx, out)


class Filter(Op):
    """An op that drops records; subclasses implement :meth:`drop_reasons`."""

    def drop_reasons(self, live: pa.Table) -> Sequence[str | None]:  # pragma: no cover
        raise NotImplementedError

    def __call__(self, batch: pa.Table) -> pa.Table:
        mask = live_mask(batch).to_numpy(zero_copy_only=False)
        live_idx = np.flatnonzero(mask)
        if len(live_idx) == 0:
            return batch
        live = batch if len(live_idx) == batch.num_rows else batch.take(live_idx)
        reasons = self.drop_reasons(live)
        if len(reasons) != len(live_idx):
            raise AssertionError(f"{self.name}: {len(reasons)} reasons for {len(live_idx)} rows")
        full = np.full(batch.num_rows, None, dtype=object)
        full[live_idx] = np.asarray(reasons, dtype=object)
        return set_drop_reasons(batch, full)


class BarrierOp(Op, metaclass=abc.ABCMeta):
    """A stage that needs all records before it can decide (dedup, sample).

    The runtime calls ``prepare`` per batch before the barrier, then :meth:`plan` once over
    all prepared parts for the global decision, then ``apply(batch, decision)`` per batch
    after it. The op keeps its planner beside it (``ops/<op>/planner.py``); the runtime
    hands the planner what it needs (parts, spill space, shard workers) through the
    :class:`~dataforge.ops.barrier.BarrierContext`.
    """

    def prepare(self, batch: pa.Table) -> pa.Table:
        """Add the columns the global plan needs (signatures, units). Default: none."""
        return batch

    @abc.abstractmethod
    def plan(self, ctx: BarrierContext) -> dict[str, Any]:
        """Read every prepared part (``ctx.parts``), write one decision file per task into
        ``ctx.decision_dir`` (and audit files into ``ctx.audit_dir``), and return the
        stage's JSON-able summary."""

    def apply(self, batch: pa.Table, decision: Any) -> pa.Table:  # pragma: no cover
        raise NotImplementedError

    def __call__(self, batch: pa.Table) -> pa.Table:
        raise TypeError(f"{self.name} is a barrier stage: the runtime calls prepare/plan/apply")


def set_drop_reasons(batch: pa.Table, reasons: Sequence[str | None]) -> pa.Table:
    """Set ``drop`` for rows whose reason is not None, keeping earlier reasons."""
    if len(reasons) != batch.num_rows:
        raise AssertionError(f"{len(reasons)} reasons for {batch.num_rows} rows")
    merged = pc.coalesce(batch.column(DROP), pa.array(reasons, pa.string()))
    return batch.set_column(batch.schema.get_field_index(DROP), DROP, merged)


def _scatter(batch: pa.Table, live_idx: np.ndarray, live_out: pa.Table) -> pa.Table:
    """Put transformed live rows back in place; dropped rows keep their values and get
    nulls in any column the transform added."""
    if live_out.num_rows != len(live_idx):
        raise AssertionError("a Mapper must return one row per live input row")
    dead_idx = np.setdiff1d(np.arange(batch.num_rows), live_idx)
    dead = batch.take(dead_idx)
    for field in live_out.schema:
        if field.name not in dead.column_names:
            dead = dead.append_column(field, pa.nulls(dead.num_rows, field.type))
    dead = dead.select(live_out.column_names).cast(live_out.schema)
    merged = pa.concat_tables([live_out, dead])
    order = np.argsort(np.concatenate([live_idx, dead_idx]), kind="stable")
    return merged.take(order)


# YAML op name -> "module:Class". Lazy so that importing the registry loads no models and
# so that one op's heavy imports (jieba, kenlm, sentencepiece) are paid only when used.
OP_REGISTRY: dict[str, str] = {
    "clean": "dataforge.ops.clean:Clean",
    "lang_id": "dataforge.ops.lang_id:LangId",
    "quality_filter": "dataforge.ops.quality:QualityFilter",
    "perplexity_filter": "dataforge.ops.perplexity:PerplexityFilter",
    "quality_classifier": "dataforge.ops.quality_classifier:QualityClassifier",
    "decontaminate": "dataforge.ops.decontaminate:Decontaminate",
    "dedup": "dataforge.ops.dedup:Dedup",
    "sample": "dataforge.ops.sample:Sample",
    "tokenize": "dataforge.ops.tokenize:Tokenize",
    "format_sft": "dataforge.ops.formatting:FormatSFT",
    "format_dpo": "dataforge.ops.formatting:FormatDPO",
    "pii": "dataforge.ops.pii:Pii",
    "extract": "dataforge.ops.extract:Extract",
    "url_filter": "dataforge.ops.url_filter:UrlFilter",
    "line_dedup": "dataforge.ops.line_dedup:LineDedup",
}


def op_class(name: str) -> type[Op]:
    """Resolve a YAML op name to its class.

    Raises:
        ValueError: the name is unknown (the message lists the valid names).
    """
    if name not in OP_REGISTRY:
        raise ValueError(f"unknown op {name!r}; valid ops: {', '.join(sorted(OP_REGISTRY))}")
    module_name, _, class_name = OP_REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)
