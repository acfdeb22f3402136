"""Ray execution: each segment's tasks run on a Ray Data actor pool.

``dataforge run`` starts embedded local Ray or joins a cluster
(:mod:`dataforge.runtime.cluster`: connection, authentication, path checks). One Ray Data dataset of task descriptors per segment
is mapped by :class:`_SegmentActor` (``compute=ActorPoolStrategy``): every actor loads the
segment's ops once (jieba, KenLM, tokenizer) and processes whole input files, committing
one part per task. The fused per-actor op chain avoids an Arrow hand-off between stages,
which on small machines costs more than the stages themselves.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
from ray.util.annotations import RayDeprecationWarning

from dataforge.config import PipelineConfig
from dataforge.io.readers import InputTask
from dataforge.runtime.cluster import (
    check_nodes_see_paths,
    connect,
    resolve_address,
    resolve_run_paths,
)
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.segments import Segment, SegmentRunner

__all__ = ["RayExecutor", "run_on_ray"]


class _SegmentActor:
    """Callable class for ``map_batches``: one SegmentRunner per actor."""

    def __init__(self, config: PipelineConfig, segment: Segment, work_dir: str) -> None:
        self.runner = SegmentRunner(config, segment, work_dir)

    def __call__(self, batch: pa.Table) -> pa.Table:
        results = []
        for task_json in batch.column("task").to_pylist():
            stats = self.runner.run_task(json.loads(task_json))
            results.append(json.dumps({"task_id": stats["task_id"], "rows": stats["rows_written"]}))
        return pa.table({"result": results})


class RayExecutor:
    """Runs a segment's tasks on a Ray Data actor pool sized from the config or cluster."""

    ray_available = True

    def __init__(self, config: PipelineConfig, cluster: bool = False) -> None:
        self.config = config
        self.cluster = cluster
        self.num_cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def check_paths(self, config: PipelineConfig, work: Path, tasks: list[InputTask]) -> None:
        """On a cluster, fail before any work if a node cannot see a path of the run
        (embedded Ray runs on the driver's machine and sees what it sees)."""
        if self.cluster:
            check_nodes_see_paths(config, work, tasks)

    def run_segment(
        self,
        config: PipelineConfig,
        segment: Segment,
        work_dir: Path,
        tasks: list[dict[str, Any]],
        log: Callable[[str], None],
    ) -> None:
        cpus_per_actor = config.ray.cpus_per_actor
        size = config.ray.actors or max(1, int(self.num_cpus // cpus_per_actor))
        size = min(size, len(tasks))
        ds = ray.data.from_items(
            [{"task": json.dumps(t)} for t in tasks], override_num_blocks=len(tasks)
        )
        with warnings.catch_warnings():
            # Ray 2.60 has no named parameter for the actors' restart limits yet and warns
            # about passing them as remote args; the limits matter more than the warning.
            warnings.simplefilter("ignore", RayDeprecationWarning)
            ds = ds.map_batches(
                _SegmentActor,
                fn_constructor_kwargs={
                    "config": config,
                    "segment": segment,
                    "work_dir": str(work_dir),
                },
                batch_size=1,
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=size),
                num_cpus=cpus_per_actor,
                max_restarts=config.ray.max_task_retries,
                max_task_retries=config.ray.max_task_retries,
            )
        done = 0
        for row in ds.iter_rows():
            done += 1
            result = json.loads(row["result"])
            log(
                f"segment {segment.index}: task {result['task_id']} committed "
                f"({result['rows']} rows) [{done}/{len(tasks)}]"
            )


def run_on_ray(
    config: PipelineConfig,
    out: Path,
    address: str | None = None,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``dataforge run``: resolve the run's paths, claim and lock ``out``, then start or
    join Ray and run the pipeline on it (a refused or already complete run never starts
    Ray)."""
    config, out = resolve_run_paths(config, out)
    kwargs = {"log": log} if log else {}

    def start_ray() -> RayExecutor:
        where = connect(config, address)
        if log:
            log(f"running on {where}")
        return RayExecutor(config, cluster=resolve_address(config, address) is not None)

    return run_pipeline(config, out, start_ray, overwrite=overwrite, **kwargs)
