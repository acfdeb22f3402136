"""Trainer step time vs a bare PyTorch loop on the same model, batch and precision.

Both run in this process, interleaved in rounds so that load from other processes hits
both alike. Our time per step is the interval between consecutive batch requests inside
``trainer.loop.train`` (so it includes everything the loop does per step: global target
count, scaler, clipping, scheduler, metrics JSONL), after ``--warmup`` steps. Prints the
median step times and the ratio (target <= 1.05).

    .venv/bin/python benchmarks/train_step_overhead.py [--quick] [--precision bf16]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from trainer.config import config_from_mapping
from trainer.data.sources import ListBatchSource
from trainer.loop import lr_factor, train
from trainer.model.transformer import Transformer


class TimedSource(ListBatchSource):
    """Records when each batch is requested: consecutive gaps are whole loop steps."""

    def __init__(self, batches):
        super().__init__(batches)
        self.stamps: list[float] = []

    def __iter__(self):
        for batch in super().__iter__():
            self.stamps.append(time.perf_counter())
            yield batch


def bare_loop(config, batch, steps: int) -> list[float]:
    """The baseline: what a minimal hand-written loop does per step."""
    torch.manual_seed(0)
    model = Transformer(config.model)
    opt = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, betas=config.optim.betas)
    factor = lr_factor(config.optim, config.train.max_steps)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.train.precision)
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = config.optim.lr * factor(step)
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            logits = model(batch["input_ids"], batch["position_ids"])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        times.append(time.perf_counter() - t0)
    return times


def ours(config, batch, steps: int) -> list[float]:
    source = TimedSource([batch])
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config_from_mapping(
            {
                **_raw(config),
                "run_dir": f"{tmp}/run",
                "checkpoint": {"dir": f"{tmp}/ck", "interval": 10**6},
            }
        )
        train(cfg, "pretrain", source=source)
    gaps = [b - a for a, b in zip(source.stamps, source.stamps[1:], strict=False)]
    return gaps[: steps - 1]


def _raw(config) -> dict:
    from trainer.config import to_plain

    raw = to_plain(config)
    raw["optim"]["betas"] = list(raw["optim"]["betas"])
    return raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small model, few steps")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hidden, layers, vocab, rows, width, steps = (
        (128, 2, 2048, 4, 64, 25) if args.quick else (256, 4, 8192, 8, 128, 40)
    )
    warmup = 5
    config = config_from_mapping(
        {
            "model": dict(
                vocab_size=vocab, hidden_size=hidden, n_layers=layers, n_heads=4, max_seq_len=width
            ),
            "train": dict(
                max_steps=steps,
                precision=args.precision,
                device="cpu",
                tensorboard=False,
                log_interval=10**6,
            ),
            "optim": dict(lr=3e-4, min_lr=3e-5, warmup_steps=2, weight_decay=0.0),
            "data": {"source": "synthetic"},
        }
    )
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(vocab, (rows, width), generator=gen)
    labels = torch.cat([ids[:, 1:], torch.full((rows, 1), -100)], dim=1)
    batch = {
        "input_ids": ids,
        "labels": labels,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(width).expand(rows, width).contiguous(),
    }
    base_times, our_times = [], []
    for _ in range(args.rounds):
        base_times += bare_loop(config, batch, steps)[warmup:]
        our_times += ours(config, batch, steps)[warmup:]
    base, mine = statistics.median(base_times), statistics.median(our_times)
    print(
        f"model hidden={hidden} layers={layers} vocab={vocab} batch={rows}x{width} "
        f"precision={args.precision} threads={args.threads} rounds={args.rounds}"
    )
    print(f"bare loop   median step {base * 1e3:8.2f} ms  ({len(base_times)} steps)")
    print(f"trainer     median step {mine * 1e3:8.2f} ms  ({len(our_times)} steps)")
    print(f"ratio trainer/bare: {mine / base:.3f}x (target <= 1.05)")


if __name__ == "__main__":
    main()
