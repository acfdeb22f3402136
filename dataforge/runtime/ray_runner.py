"""Ray execution: each segment's tasks run on a Ray Data actor pool.

``dataforge run`` starts embedded local Ray (``ray.init`` with CPUs and object-store
memory from the config or detected), or joins a cluster given by ``--address``,
``ray.address`` or ``RAY_ADDRESS``. One Ray Data dataset of task descriptors per segment
is mapped by :class:`_SegmentActor` (``compute=ActorPoolStrategy``): every actor loads the
segment's ops once (jieba, KenLM, tokenizer) and processes whole input files, committing
one part per task. The fused per-actor op chain avoids an Arrow hand-off between stages,
which on small machines costs more than the stages themselves.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray

from dataforge.config import PipelineConfig
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.segments import Segment, SegmentRunner

__all__ = ["RayExecutor", "init_ray", "run_on_ray"]


def init_ray(config: PipelineConfig, address: str | None) -> str:
    """Connect to the cluster (``address``, ``ray.address``, ``RAY_ADDRESS``) or start
    embedded local Ray. Returns a description for the log."""
    if not sys.stderr.isatty():
        # Without a terminal Ray Data logs a progress table every few seconds; keep the
        # log readable (our own per-task lines remain).
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        ray.data.DataContext.get_current().enable_progress_bars = False
    if ray.is_initialized():
        return "already initialized Ray"
    address = address or config.ray.address or os.environ.get("RAY_ADDRESS")
    # Quiet, deterministic-enough Ray Data output; progress bars stay on.
    env = {"env_vars": {"PYTHONHASHSEED": "0"}}
    if address:
        ray.init(address=address, runtime_env=env, log_to_driver=True)
        return f"Ray cluster at {address}"
    ray.init(
        num_cpus=config.ray.num_cpus or os.cpu_count() or 1,
        object_store_memory=config.ray.object_store_memory,
        include_dashboard=False,
        runtime_env=env,
        log_to_driver=True,
    )
    return f"embedded local Ray ({int(ray.cluster_resources().get('CPU', 0))} CPUs)"


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

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.num_cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))

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
        ds = ds.map_batches(
            _SegmentActor,
            fn_constructor_kwargs={"config": config, "segment": segment, "work_dir": str(work_dir)},
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
    """``dataforge run``: claim and lock ``out``, then start or join Ray and run the
    pipeline on it (a refused or already complete run never starts Ray)."""
    kwargs = {"log": log} if log else {}

    def start_ray() -> RayExecutor:
        where = init_ray(config, address)
        if log:
            log(f"running on {where}")
        return RayExecutor(config)

    return run_pipeline(config, out, start_ray, overwrite=overwrite, **kwargs)
