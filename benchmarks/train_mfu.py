"""Tokens/s and MFU of the trainer for the ~1B and 3B presets in bf16 (one GPU).

MFU = model FLOPs per second (6N + attention, see
``trainer.model.transformer.flops_per_token``) over the device's dense bf16 peak from its
spec sheet. As a baseline measured in this process, it also times a large bf16 matmul and
prints the trainer's FLOP/s as a fraction of that (what the device really sustains).
Target on H100/H200: MFU >= 45% at 1B.

On a machine without CUDA it runs the ``tiny`` preset on CPU (no spec peak: only the
fraction of the measured matmul rate is printed).

    .venv/bin/python benchmarks/train_mfu.py                 # GPU: 1b and 1.7b (the seed's shape)
    .venv/bin/python benchmarks/train_mfu.py --presets 1b --steps 30 --batch-size 8
    .venv/bin/python benchmarks/train_mfu.py --quick         # CPU smoke size
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from trainer.config import config_from_mapping
from trainer.loop import train
from trainer.model.transformer import flops_per_token
from trainer.telemetry.metrics import device_peak_flops


def matmul_flops(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> float:
    """Sustained FLOP/s of an n x n x n matmul: the baseline the trainer is compared to."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * repeats / (time.perf_counter() - t0)


def run_preset(preset: str, args, device: torch.device) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        config = config_from_mapping(
            {
                "model": {"preset": preset, "vocab_size": args.vocab, "max_seq_len": args.seq_len},
                "train": {
                    "max_steps": args.steps,
                    "precision": args.precision,
                    "device": device.type,
                    "tensorboard": False,
                    "log_interval": max(1, args.steps // 5),
                    "activation_checkpointing": args.activation_checkpointing,
                    "compile": args.compile,
                },
                "optim": {"warmup_steps": 1},
                "data": {
                    "source": "synthetic",
                    "batch_size": args.batch_size,
                    "seq_len": args.seq_len,
                },
                "checkpoint": {"dir": f"{tmp}/ck", "interval": 10**9},
                "run_dir": f"{tmp}/run",
            }
        )
        train(config, "pretrain")
        records = [json.loads(x) for x in Path(f"{tmp}/run/metrics.jsonl").read_text().splitlines()]
    steady = records[args.warmup :]
    tokens_per_s = statistics.median(r["tokens_per_s"] for r in steady)
    mfu = [r["mfu"] for r in steady if r["mfu"] is not None]
    return {
        "preset": preset,
        "tokens_per_s": tokens_per_s,
        "flops_per_s": tokens_per_s * flops_per_token(config.model, args.seq_len),
        "mfu": statistics.median(mfu) if mfu else None,
        "mem_gib": max(r.get("mem_reserved_gib", r.get("max_rss_gib", 0.0)) for r in steady),
        "n_params": _param_count(config.model),
    }


def _param_count(model) -> int:
    d, f, layers, vocab = model.hidden_size, model.ffn_size, model.n_layers, model.vocab_size
    mlp = d * f * (3 if model.mlp == "swiglu" else 2)
    embeddings = vocab * d * (1 if model.tie_embeddings else 2)
    return layers * (4 * d * d + mlp + 2 * d) + embeddings + d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--presets", nargs="+", default=None, help="default: 1b 1.7b on GPU, tiny on CPU"
    )
    parser.add_argument("--quick", action="store_true", help="CPU smoke size (tiny preset)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None, help="steps left out of the medians")
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per step")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.quick
    device = torch.device("cuda" if cuda else "cpu")
    presets = args.presets or (["1b", "1.7b"] if cuda else ["tiny"])
    args.steps = args.steps or (30 if cuda else 12)
    args.warmup = args.warmup if args.warmup is not None else (10 if cuda else 4)
    args.batch_size = args.batch_size or (8 if cuda else 4)
    args.seq_len = args.seq_len or (2048 if cuda else 128)
    if not cuda and args.vocab == 32000:
        args.vocab = 2048
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    baseline = matmul_flops(device, dtype, 8192 if cuda else 512, 50 if cuda else 5)
    peak = device_peak_flops(device, args.precision, None)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    print(f"device {name}; measured {args.precision} matmul {baseline / 1e9:,.1f} GFLOP/s", end="")
    print(f"; spec dense peak {peak / 1e9:,.0f} GFLOP/s" if peak else "; spec peak unknown")
    for preset in presets:
        r = run_preset(preset, args, device)
        mfu = f"MFU {r['mfu']:.1%} (target >= 45% at 1b)" if r["mfu"] is not None else "MFU n/a"
        print(
            f"{preset:>5}: {r['n_params'] / 1e6:,.1f}M params, batch {args.batch_size}x{args.seq_len}, "
            f"{r['tokens_per_s']:,.0f} tok/s, {r['flops_per_s'] / 1e9:,.1f} GFLOP/s, {mfu}, "
            f"ratio to measured matmul {r['flops_per_s'] / baseline:.3f}, mem {r['mem_gib']:.1f} GiB"
        )


if __name__ == "__main__":
    main()
