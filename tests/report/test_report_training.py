"""A tiny training run: its console, its Prometheus endpoint scraped over HTTP while it
runs, and ``dataforge report RUN_DIR`` rendered in Chromium."""

from __future__ import annotations

import math
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from chromium_kit import render
from prometheus_client.parser import text_string_to_metric_families
from test_report_run import screenshot_dir

from trainer.config import config_from_mapping
from trainer.loop import train
from trainer.telemetry.console import Console
from trainer.telemetry.prometheus import PrometheusExporter

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STEPS = 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp_path: Path, port: int):
    return config_from_mapping(
        {
            "model": {"preset": "tiny", "vocab_size": 64},
            "train": {
                "max_steps": STEPS,
                "precision": "fp32",
                "device": "cpu",
                "tensorboard": False,
                "log_interval": 10,
            },  # fmt: skip
            "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2},
            "checkpoint": {"dir": str(tmp_path / "ckpt"), "interval": 20},
            "run_dir": str(tmp_path / "run"),
            "data": {"source": "synthetic", "batch_size": 4, "seq_len": 32},
            "metrics": {"prometheus_port": port},
        }
    )


def _scrape(port: int) -> dict[str, float] | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        return None
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


def test_tiny_training_run_console_metrics_endpoint_and_report(
    tmp_path, capsys, monkeypatch
) -> None:
    port = _free_port()
    config = _config(tmp_path, port)
    # Scrape over HTTP from inside the run, at every console step line (steps 10, 20, 30,
    # 40), so the test does not depend on how fast the run is: the endpoint then serves the
    # previous logged step's values.
    seen: list[dict[str, float]] = []
    console_step = Console.step

    def step_and_scrape(self, record):
        values = _scrape(port)
        if values and values.get("dataforge_train_step", 0) >= 1:
            seen.append(values)
        console_step(self, record)

    monkeypatch.setattr(Console, "step", step_and_scrape)
    result = train(config, "pretrain")
    assert result.steps == STEPS
    assert len(seen) >= 2, "the endpoint was never scraped during the run"
    mid = seen[-1]
    assert 1 <= mid["dataforge_train_step"] <= STEPS
    assert math.isfinite(mid["dataforge_train_loss"]) and 0 < mid["dataforge_train_loss"] < 10
    assert mid["dataforge_train_tokens_per_second"] > 0
    assert mid["dataforge_train_step_time_seconds"] > 0
    assert 0 <= mid["dataforge_train_data_wait_seconds"] <= mid["dataforge_train_step_time_seconds"]
    assert 0 < mid["dataforge_train_learning_rate"] <= 3e-3
    # 4 x 32 tokens per step, all real (synthetic batches have no padding)
    assert mid["dataforge_train_tokens_total"] == 128 * mid["dataforge_train_step"]
    steps = [s["dataforge_train_step"] for s in seen]
    assert steps == sorted(steps)
    # on a CPU the GPU metrics are absent, and so is MFU (no known peak)
    # on one process no all-reduce is timed, so its metric is absent too
    absent = {"gpu_utilization", "memory_allocated", "dataforge_train_mfu", "nccl_all_reduce_time"}
    assert not absent & set(mid)
    assert _scrape(port) is None  # closed with the run
    # every trainer metric the Grafana dashboard queries is served (MFU needs a known peak)
    dashboard = (ROOT / "docs" / "grafana" / "dataforge.json").read_text()
    queried = set(re.findall(r"\bdataforge_train_\w+", dashboard)) - {"dataforge_train_mfu"}
    assert queried and queried <= set(mid)

    out = capsys.readouterr().out
    assert "pretrain: 0.1M parameters" in out and "up to 128 tokens per step" in out
    assert "precision fp32, parallelism single process" in out and "starting from step 0" in out
    assert f"step     10/{STEPS}" in out and "ETA" in out and "rss" in out
    assert "allreduce" not in out
    assert "checkpoint step 20 ->" in out and f"checkpoint step {STEPS} ->" in out
    assert "exported weights ->" in out and f"done: {STEPS} steps (0 -> {STEPS})" in out

    report = subprocess.run(
        [sys.executable, "-m", "dataforge.cli", "report", str(tmp_path / "run")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    html = Path(report.stdout.strip())
    assert html == tmp_path / "run" / "report.html"
    shot = screenshot_dir(tmp_path) / "report-training.png"
    rendered = render(html, shot, tmp_path / "profile")
    assert rendered["errors"] == [] and rendered["requests"] == []
    plots = {p["name"]: p for p in rendered["plots"]}
    assert set(plots) == {"loss", "lr", "grad_norm", "tokens_per_s", "memory"}
    for plot in plots.values():
        assert plot["width"] > 300 and plot["height"] > 150 and plot["marks"] >= 1, plot
    assert plots["loss"]["marks"] == 2  # raw and smoothed


def test_dpo_lines_carry_preference_metrics(capsys) -> None:
    config = config_from_mapping(
        {
            "model": {"preset": "tiny", "vocab_size": 64},
            "train": {"max_steps": 4, "log_interval": 2},
            "optim": {"warmup_steps": 1},
        }
    )
    console = Console(config, "dpo", enabled=True)
    record = {"applied": 1.0, "step": 2, "loss": 0.6931, "lr": 1e-5, "grad_norm": 0.5,
              "tokens_per_s": 1000.0, "step_time_s": 0.5, "data_wait_frac": 0.1, "mfu": None,
              "preference_accuracy": 0.75, "reward_margin": 0.125, "max_rss_gib": 1.0}  # fmt: skip
    console.step(record)
    line = capsys.readouterr().out
    assert "step      2/4 loss 0.6931 acc 0.750 margin 0.125" in line
    assert "tok/s 1,000" in line and "ETA 1s" in line


def test_all_reduce_time_is_served_and_printed_when_present(capsys) -> None:
    """A DDP step's record (``trainer.parallel.comm_timing``) reaches the endpoint and the console
    line under the seed's name; the 2-process runs are in test_trainer_distributed."""
    train = {"max_steps": 4, "log_interval": 2}
    model = {"preset": "tiny", "vocab_size": 64}
    config = config_from_mapping({"model": model, "train": train, "optim": {"warmup_steps": 1}})
    record = {"applied": 1.0, "step": 2, "loss": 2.5, "lr": 1e-3, "grad_norm": 0.5,
              "tokens_per_s": 1000.0, "step_time_s": 0.5, "data_wait_frac": 0.1, "mfu": None,
              "max_rss_gib": 1.0, "nccl_all_reduce_time": 0.0125}  # fmt: skip
    Console(config, "pretrain", enabled=True).step(record)
    assert "data 10.0% allreduce 12.5 ms rss" in capsys.readouterr().out
    exporter = PrometheusExporter("127.0.0.1", 0, cuda=False)
    try:
        exporter.update({k: v for k, v in record.items() if k != "nccl_all_reduce_time"}, 0)
        assert "nccl_all_reduce_time" not in _scrape(exporter.port)
        exporter.update(record, 128)
        assert _scrape(exporter.port)["nccl_all_reduce_time"] == 0.0125
    finally:
        exporter.close()


def test_report_of_a_directory_without_a_run_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dataforge.cli", "report", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "neither a pipeline run directory (manifest.json) nor a training run" in proc.stderr
