"""One torch.distributed rank (gloo) reading an epoch; run as a script by the loader tests:
``python loader_rank_main.py RANK WORLD PORT DATA CACHE_DIR OUT_DIR``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

from dataforge.loader import LoaderConfig, build_dataloader

FIRST = 1000  # loader_shards.FIRST: a sample's first token is FIRST + its index


def main(rank: int, world: int, port: int, data: str, cache_dir: str, out: str) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        # The test process hosts the rendezvous store (as torchrun's agent does): with
        # rank 0 hosting it, rank 0 could exit while rank 1 still tore its group down.
        TORCHELASTIC_USE_AGENT_STORE="True",
    )
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        cfg = LoaderConfig(
            streams=[{"path": data}], max_tokens=512, max_seq_len=128, cache_dir=cache_dir, seed=3
        )
        with build_dataloader(cfg) as loader:
            seen = [int(i) - FIRST for b in loader for i in b["input_ids"][:, 0]]
            result = {"batches": len(loader), "seen": seen, "run_dir": str(loader.source.run_dir)}
            dist.barrier()  # every rank has read its epoch before the owner removes the run dir
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    r, w, p, d, c, o = sys.argv[1:7]
    main(int(r), int(w), int(p), d, c, o)
