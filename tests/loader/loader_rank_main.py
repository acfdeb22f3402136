"""One torch.distributed rank (gloo) reading an epoch; run as a script by the loader tests:
``python loader_rank_main.py RANK WORLD PORT DATA CACHE_DIR OUT_DIR``."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch.distributed as dist

from dataforge.loader import LoaderConfig, build_dataloader

FIRST = 1000  # loader_shards.FIRST: a sample's first token is FIRST + its index


def let_other_ranks_create_segments() -> None:
    """Make this rank attach to every segment streaming creates attach-or-create, after
    another local rank created it: which rank creates a segment is otherwise a race."""
    from streaming.base.shared import memory

    original = memory.SharedMemory.__init__

    def attach_after_creation(self, name=None, create=None, size=0, auto_cleanup=True):
        if create is None and name is not None:
            segment = Path("/dev/shm", name.lstrip("/"))
            deadline = time.monotonic() + 120
            while not segment.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        original(self, name, create, size, auto_cleanup)

    memory.SharedMemory.__init__ = attach_after_creation


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
    if rank == 0 and os.environ.get("LOADER_TEST_OTHERS_CREATE") == "1":
        let_other_ranks_create_segments()
    try:
        cfg = LoaderConfig(
            streams=[{"path": data}], max_tokens=512, max_seq_len=128, cache_dir=cache_dir, seed=3
        )
        with build_dataloader(cfg) as loader:
            seen = [int(i) - FIRST for b in loader for i in b["input_ids"][:, 0]]
            result = {"batches": len(loader), "seen": seen, "run_dir": str(loader.source.run_dir)}
            dist.barrier()  # every rank has read its epoch before the owner removes the run dir
        dist.barrier()  # every rank has closed its loader (the owner unlinked) before any exits
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    r, w, p, d, c, o = sys.argv[1:7]
    main(int(r), int(w), int(p), d, c, o)
