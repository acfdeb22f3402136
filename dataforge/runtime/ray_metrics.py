"""The pipeline's counters and stage timings, published through Ray's metrics API.

:class:`RayMetrics` listens to :class:`dataforge.runtime.progress.RunProgress` on the
driver and records into ``ray.util.metrics``; every Ray node's metrics agent serves them in
Prometheus text format on its metrics export port (``ray.nodes()[i]["MetricsExportPort"]``),
which a cluster's Prometheus scrapes (Ray adds the ``ray_`` prefix) and the Ray dashboard
shows. Names and tags (``run`` is the pipeline name):

=================================  ==========  ======================================
metric                             type        tags
=================================  ==========  ======================================
``dataforge_records``              counter     run, segment, source, outcome (kept|dropped)
``dataforge_dropped``              counter     run, source, reason
``dataforge_input_bytes``          counter     run, segment
``dataforge_tasks``                counter     run, segment
``dataforge_stage_seconds``        counter     run, stage (``<index>:<op>``): in-task time
``dataforge_stage_cpu_seconds``    counter     run, stage: CPU time
``dataforge_phase_seconds``        gauge       run, phase (segment or barrier): wall time
=================================  ==========  ======================================
"""

from __future__ import annotations

from typing import Any

from ray.util import metrics

from dataforge.config import PipelineConfig

__all__ = ["RayMetrics"]


class RayMetrics:
    """Records a run's events as Ray metrics (see the module docstring)."""

    def __init__(self, config: PipelineConfig) -> None:
        self.run = config.name
        self.stage_names = {str(i): f"{i}:{s.op}" for i, s in enumerate(config.stages)}
        keys = ("run", "segment", "source", "outcome")
        self.records = metrics.Counter(
            "dataforge_records", "Records a segment kept or dropped", tag_keys=keys
        )
        self.dropped = metrics.Counter(
            "dataforge_dropped", "Dropped records by reason", tag_keys=("run", "source", "reason")
        )
        self.input_bytes = metrics.Counter(
            "dataforge_input_bytes", "Input bytes of committed tasks", tag_keys=("run", "segment")
        )
        self.tasks = metrics.Counter(
            "dataforge_tasks", "Committed tasks", tag_keys=("run", "segment")
        )
        self.stage_seconds = metrics.Counter(
            "dataforge_stage_seconds", "Seconds inside a stage", tag_keys=("run", "stage")
        )
        self.stage_cpu = metrics.Counter(
            "dataforge_stage_cpu_seconds", "CPU seconds of a stage", tag_keys=("run", "stage")
        )
        self.phase_seconds = metrics.Gauge(
            "dataforge_phase_seconds", "Wall seconds of a finished phase", tag_keys=("run", "phase")
        )

    def task_committed(self, segment: int, stats: dict[str, Any], input_bytes: int) -> None:
        seg = str(segment)
        self.tasks.inc(1, {"run": self.run, "segment": seg})
        if input_bytes:
            self.input_bytes.inc(input_bytes, {"run": self.run, "segment": seg})
        for source, c in stats["by_source"].items():
            tags = {"run": self.run, "segment": seg, "source": source}
            if c["docs"]:
                self.records.inc(c["docs"], tags | {"outcome": "kept"})
            if c["dropped"]:
                self.records.inc(sum(c["dropped"].values()), tags | {"outcome": "dropped"})
            for reason, n in c["dropped"].items():
                self.dropped.inc(n, {"run": self.run, "source": source, "reason": reason})
        for field, counter in (
            ("op_seconds", self.stage_seconds),
            ("op_cpu_seconds", self.stage_cpu),
        ):
            for key, seconds in stats.get(field, {}).items():
                if seconds > 0:
                    stage = self.stage_names.get(key, key)
                    counter.inc(seconds, {"run": self.run, "stage": stage})

    def phase_finished(self, name: str, seconds: float) -> None:
        self.phase_seconds.set(seconds, {"run": self.run, "phase": name})
