"""The GPU check's Python part (run by ``benchmarks/gpu_check.sh``): one line per figure.

``single`` runs, in one process: a bf16 step of the ``1b`` preset with scaled-dot-product
attention restricted to the flash kernel (any other kernel is an error, so a finished run
proves flash was chosen), its MFU and tokens/s, peak memory without and with activation
checkpointing, and fp16 with the dynamic GradScaler. ``fsdp`` runs under ``torchrun``
(one rank per GPU) and prints the FSDP2 step from rank 0; ``tp`` runs under ``torchrun``
with 2 ranks and prints a bf16 step with ``distributed.tp: 2`` (DTensor tensor
parallelism) from rank 0. ``--dry-run`` uses the ``tiny``
preset and short rows on CPU (fp32 and bf16 autocast, no flash restriction, memory is the
process's max RSS): it proves the script works before a GPU is lent.

    .venv/bin/python benchmarks/gpu_check.py single [--dry-run]
    .venv/bin/python -m torch.distributed.run --nproc_per_node N benchmarks/gpu_check.py fsdp
    .venv/bin/python -m torch.distributed.run --nproc_per_node 2 benchmarks/gpu_check.py tp
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
from pathlib import Path

import torch

from trainer.config import config_from_mapping
from trainer.loop import train

FULL = {"preset": "1b", "vocab": 32000, "batch_size": 8, "seq_len": 2048, "steps": 10, "warmup": 3}
DRY = {"preset": "tiny", "vocab": 512, "batch_size": 2, "seq_len": 64, "steps": 3, "warmup": 1}


def _records(shape: dict, device: str, **train_keys) -> list[dict]:
    """Train ``shape`` on synthetic tokens; the steady steps' metrics records. Under
    torchrun every rank gets the same ``GPU_CHECK_DIR`` (checkpoints are shared)."""
    shared = os.environ.get("GPU_CHECK_DIR")
    with tempfile.TemporaryDirectory() if shared is None else _fixed(shared) as tmp:
        distributed = {"strategy": train_keys.pop("strategy", "ddp")}
        distributed["tp"] = train_keys.pop("tp", 1)
        config = config_from_mapping(
            {
                "model": {
                    "preset": shape["preset"],
                    "vocab_size": shape["vocab"],
                    "max_seq_len": shape["seq_len"],
                },
                "train": {
                    "max_steps": shape["steps"] + 1,  # stopped before: no checkpoint, no export
                    "device": device,
                    "tensorboard": False,
                    "log_interval": shape["steps"],
                    **train_keys,
                },
                "optim": {"warmup_steps": 1},
                "data": {
                    "source": "synthetic",
                    "batch_size": shape["batch_size"],
                    "seq_len": shape["seq_len"],
                },
                "distributed": distributed,
                "checkpoint": {"dir": f"{tmp}/ck", "interval": 10**9},
                "run_dir": f"{tmp}/run",
            }
        )
        train(config, "pretrain", stop_after=shape["steps"])
        path = Path(f"{tmp}/run/metrics.jsonl")
        lines = path.read_text().splitlines() if path.exists() else []  # rank 0 writes
    return [json.loads(x) for x in lines][shape["warmup"] :]


@contextlib.contextmanager
def _fixed(path: str):
    yield path


def _summary(records: list[dict]) -> str:
    last = records[-1]
    step_time = statistics.median(r["step_time_s"] for r in records)
    tokens = statistics.median(r["tokens_per_s"] for r in records)
    applied = sum(int(r["applied"]) for r in records)
    return (
        f"loss={last['loss']:.4f} step_time_s={step_time:.4f} tokens_per_s={tokens:,.0f} "
        f"applied={applied}/{len(records)}"
    )


def _peak_memory(records: list[dict]) -> str:
    if "mem_allocated_gib" in records[0]:
        allocated = max(r["mem_allocated_gib"] for r in records)
        reserved = max(r["mem_reserved_gib"] for r in records)
        return f"allocated_gib={allocated:.2f} reserved_gib={reserved:.2f}"
    return f"max_rss_gib={max(r['max_rss_gib'] for r in records):.2f} (cpu: whole process)"


def single(dry_run: bool) -> None:
    shape, device = (DRY, "cpu") if dry_run else (FULL, "cuda")
    if not dry_run and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device (use --dry-run on a machine without a GPU)")
    name = "cpu" if dry_run else torch.cuda.get_device_name()
    print(f"device: {name} preset={shape['preset']} batch={shape['batch_size']}x{shape['seq_len']}")
    if dry_run:
        print(f"fp32 step: {_summary(_records(shape, device, precision='fp32'))}", flush=True)
        restrict = contextlib.nullcontext()
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        restrict = sdpa_kernel(SDPBackend.FLASH_ATTENTION)  # another kernel: RuntimeError
    with restrict:
        plain = _records(shape, device, precision="bf16")
        checkpointed = _records(shape, device, precision="bf16", activation_checkpointing=True)
    flash = "flash asserted" if not dry_run else "flash not asserted (cpu dry run)"
    print(f"bf16 step: {_summary(plain)} sdpa={flash}", flush=True)
    mfu = [r["mfu"] for r in plain if r.get("mfu") is not None]
    print(
        f"mfu: {statistics.median(mfu):.4f}" if mfu else "mfu: n/a (no known peak for this device)"
    )
    print(f"peak memory activation_checkpointing=off: {_peak_memory(plain)}")
    print(f"peak memory activation_checkpointing=on: {_peak_memory(checkpointed)}")
    print(f"bf16 step activation_checkpointing=on: {_summary(checkpointed)}", flush=True)
    fp16 = _records(shape, device, precision="fp16")
    scale = fp16[-1].get("loss_scale")
    print(f"fp16 step GradScaler: {_summary(fp16)} loss_scale={scale}", flush=True)


def fsdp(dry_run: bool) -> None:
    shape, device = (DRY, "cpu") if dry_run else (FULL, "cuda")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    records = _records(shape, device, precision="bf16", strategy="fsdp")
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"fsdp nproc={world}: {_summary(records)} {_peak_memory(records)}", flush=True)


def tp(dry_run: bool) -> None:
    shape, device = (DRY, "cpu") if dry_run else (FULL, "cuda")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    records = _records(shape, device, precision="bf16", strategy="fsdp", tp=2)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"tp=2 nproc={world}: {_summary(records)} {_peak_memory(records)}", flush=True)


PARTS = {"single": single, "fsdp": fsdp, "tp": tp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=list(PARTS))
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on CPU")
    args = parser.parse_args()
    PARTS[args.part](args.dry_run)


if __name__ == "__main__":
    main()
