"""Progress without a terminal (plain lines), and the pipeline's metrics read back from Ray."""

from __future__ import annotations

import io
import re
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dataforge.config import load_pipeline
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.progress import RunProgress

STAGES = """
stages:
  - {op: clean}
  - {op: quality_filter}
  - {op: dedup, method: exact}
"""


def _pipeline(pipeline_file: Path) -> Path:
    pipeline_file.write_text(pipeline_file.read_text() + STAGES, encoding="utf-8")
    return pipeline_file


def test_plain_progress_lines_and_summary_add_up(pipeline_file: Path, tmp_path: Path) -> None:
    stream = io.StringIO()
    progress = RunProgress(stream=stream, mode="plain", interval=1e-9)
    manifest = run_pipeline(
        load_pipeline(_pipeline(pipeline_file)), tmp_path / "out", LocalExecutor(),
        log=lambda m: None, progress=progress,
    )  # fmt: skip
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[dataforge] segment 0 [clean, quality_filter]: started (5 tasks, 0.0 MB)"
    # with a zero interval, a status line at least per committed task (the ticker thread
    # may add more), in order
    status = [line for line in lines if re.search(r"segment 0 [^:]*: \d/5 tasks", line)]
    done_tasks = [int(re.search(r"(\d)/5 tasks", s).group(1)) for s in status]
    assert done_tasks == sorted(done_tasks) and {1, 2, 3, 4} <= set(done_tasks)
    done = next(
        line
        for line in lines
        if line.startswith("[dataforge] segment 0 [clean, quality_filter]: done")
    )
    seg0 = manifest["counts"]["total"]
    assert f"{seg0['input']} records" in done and "5/5 tasks" in done and "ETA 0s" in done
    assert any(line.startswith("[dataforge] barrier 2 [dedup]: done, in") for line in lines)
    table = lines[lines.index("[dataforge] records per source:") + 1 :]
    rows = {r.split()[0]: r.split() for r in table[1:4]}
    for source, counts in manifest["counts"]["by_source"].items():
        assert rows[source][1:5] == [str(counts["input"]), str(counts["kept"]), "0",
                                     str(sum(counts["dropped"].values()))]  # fmt: skip
    assert manifest["stages"][1]["cpu_seconds"] <= manifest["stages"][1]["seconds"] + 0.05
    assert progress.cost_seconds > 0


@pytest.mark.ray
def test_pipeline_metrics_read_back_from_ray(pipeline_file: Path, tmp_path: Path) -> None:
    import ray

    from dataforge.runtime.executors.ray import run_on_ray

    config = load_pipeline(_pipeline(pipeline_file))
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING",
        _system_config={"metrics_report_interval_ms": 500},
    )  # fmt: skip
    try:
        manifest = run_on_ray(config, tmp_path / "out")
        port = ray.nodes()[0]["MetricsExportPort"]
        samples: dict[tuple, float] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
            samples = {
                (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k in _TAGS))): s.value
                for family in text_string_to_metric_families(text.decode())
                for s in family.samples
                if s.name.startswith("ray_dataforge_") and s.labels.get("run") == "small"
            }
            if (
                "ray_dataforge_phase_seconds",
                (("phase", "segment 1 [apply]"), ("run", "small")),
            ) in samples:
                break
            time.sleep(0.5)
    finally:
        ray.shutdown()
    counts = manifest["counts"]

    def total(name: str, **tags: str) -> float:
        return sum(v for (n, labels), v in samples.items()
                   if n == name and all((k, t) in labels for k, t in tags.items()))  # fmt: skip

    assert total("ray_dataforge_tasks_total", segment="0") == 5
    assert total("ray_dataforge_tasks_total", segment="1") == 5
    assert total("ray_dataforge_records_total", segment="0") == counts["total"]["input"]
    for source, c in counts["by_source"].items():
        for reason, n in c["dropped"].items():
            assert total("ray_dataforge_dropped_total", source=source, reason=reason) == n
    kept_after = total("ray_dataforge_records_total", segment="1", outcome="kept")
    assert kept_after == counts["total"]["kept"]
    assert total("ray_dataforge_stage_seconds_total", stage="1:quality_filter") > 0
    assert total("ray_dataforge_stage_cpu_seconds_total", stage="1:quality_filter") > 0
    assert total("ray_dataforge_phase_seconds", phase="barrier 2 [dedup]") > 0
    # every pipeline metric the Grafana dashboard queries is one Ray serves
    dashboard = (Path(__file__).parents[2] / "docs" / "grafana" / "dataforge.json").read_text()
    queried = set(re.findall(r"\bray_dataforge_\w+", dashboard))
    assert queried and queried <= {name for name, _ in samples}


_TAGS = {"run", "segment", "source", "outcome", "reason", "stage", "phase"}
