"""Per-step metrics: JSONL (one object per step) and TensorBoard, written by rank 0."""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.config import ConfigError, TrainerConfig

__all__ = ["MetricsWriter", "device_peak_flops", "memory_stats", "startup_summary"]

# Dense (no sparsity) bf16/fp16 tensor-core peak per device, FLOP/s, from vendor sheets.
# Matched by substring of torch.cuda.get_device_name(), first match wins.
DENSE_PEAK_BF16 = (
    ("GH200", 989e12),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("RTX 4090", 165e12),
    ("V100", 125e12),
)


def device_peak_flops(
    device: torch.device, precision: str, override_tflops: float | None
) -> float | None:
    """Dense peak FLOP/s of one device for MFU, or None when unknown (e.g. CPUs)."""
    if override_tflops is not None:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    if precision == "fp32":  # depends on TF32 settings; give train.peak_tflops instead
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in DENSE_PEAK_BF16 if key in name), None)


def memory_stats(device: torch.device) -> dict[str, float]:
    """GiB allocated/reserved on CUDA (peak since the last call); max RSS on CPU."""
    if device.type == "cuda":
        stats = {
            "mem_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30,
            "mem_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30,
        }
        torch.cuda.reset_peak_memory_stats(device)
        return stats
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"max_rss_gib": rss / (2**30 if sys.platform == "darwin" else 2**20)}


def _truncate(path: Path, keep_until_step: int) -> None:
    """Keep the records of steps <= ``keep_until_step`` (a resumed run rewrites the rest);
    replaced atomically, so a crash here leaves the old file.

    Raises:
        ConfigError: ``path`` is not a metrics file the trainer wrote (a symlink, not a
            regular file, or a line that is not a record with a step, except a last line
            a kill cut short).
    """
    if not (path.exists() or path.is_symlink()):
        return
    refuse = f"{path}: not a metrics file dataforge train wrote; choose another run_dir"
    if path.is_symlink() or not path.is_file():
        raise ConfigError(refuse)
    kept, lines = [], path.read_text(encoding="utf-8", errors="replace").splitlines(True)
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            if n == len(lines) and not line.endswith("\n"):
                continue  # a line cut short by the kill
            raise ConfigError(f"{refuse} (line {n})") from None
        if not (isinstance(record, dict) and isinstance(record.get("step"), int)):
            raise ConfigError(f"{refuse} (line {n})")
        if record["step"] <= keep_until_step:
            kept.append(line if line.endswith("\n") else line + "\n")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(kept))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)  # ours: tmp from mkstemp; path checked above to be our records


class MetricsWriter:
    """Appends one JSON object per step to ``run_dir/metrics.jsonl`` (and TensorBoard)."""

    def __init__(
        self, run_dir: str | Path, enabled: bool, tensorboard: bool, keep_until_step: int = 0
    ) -> None:
        self.enabled = enabled
        self.tb = None
        if not enabled:
            return
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / "metrics.jsonl"
        _truncate(path, keep_until_step)
        self.file = path.open("a", encoding="utf-8")
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(record, sort_keys=True) + "\n")
        self.file.flush()
        if self.tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step" and value is not None:
                    self.tb.add_scalar(f"train/{key}", value, record["step"])

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            if self.tb is not None:
                self.tb.close()


def startup_summary(config: TrainerConfig, model: nn.Module, stage: str, world_size: int) -> str:
    """One line: parameter count, tokens per optimizer step, steps."""
    total = model.num_params()
    tables = 1 if config.model.tie_embeddings else 2  # input embedding, output layer
    body = total - tables * config.model.vocab_size * config.model.hidden_size
    max_tokens = config.data.loader.get("max_tokens") if config.data.source == "loader" else None
    if config.data.source == "synthetic":
        max_tokens = config.data.batch_size * config.data.seq_len
    per_step = (max_tokens or 0) * config.train.grad_accum_steps * world_size
    return (
        f"[trainer] {stage}: {total / 1e6:,.1f}M parameters ({body / 1e6:,.1f}M without "
        f"embeddings and output layer), {config.model.n_layers} layers x {config.model.hidden_size}; "
        f"up to {per_step:,} tokens per step ({max_tokens or '?'} per batch x "
        f"{config.train.grad_accum_steps} accumulation x {world_size} ranks); "
        f"{config.train.max_steps} steps"
    )
