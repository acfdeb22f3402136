"""Resume state: which epoch, how many of this rank's batches the trainer has consumed,
and a fingerprint of everything that shapes the plan (config, shards, rank, world size).

The plan is a pure function of the fingerprinted inputs, so (epoch, batches consumed)
pins the exact remaining sequence, whatever the DataLoader workers had prefetched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from dataforge.loader.config import LoaderConfig

__all__ = ["STATE_FORMAT", "LoaderState", "plan_fingerprint"]

STATE_FORMAT = "dataforge.loader/1"


def plan_fingerprint(
    config: LoaderConfig, index_digests: list[str], rank: int, world_size: int
) -> str:
    """sha256 of the inputs that determine the batch plan."""
    payload = {
        "config": config.plan_fields() | {"rank": rank, "world_size": world_size},
        "index": index_digests,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


@dataclasses.dataclass
class LoaderState:
    """Progress through the batch plan (what ``state_dict()`` returns, as a dict)."""

    epoch: int = 0
    batches_consumed: int = 0
    fingerprint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any], fingerprint: str) -> LoaderState:
        """Validate a saved state against this loader's fingerprint.

        Raises:
            ValueError: another format, or a state saved with a different plan (config,
                shards, rank or world size differ), which cannot resume exactly.
        """
        if not isinstance(raw, dict) or raw.get("format") != STATE_FORMAT:
            raise ValueError(f"not a loader state of format {STATE_FORMAT!r}: {raw!r:.200}")
        if raw.get("fingerprint") != fingerprint:
            raise ValueError(
                "loader state was saved with a different plan (config, shards, rank or world size "
                f"differ): saved {raw.get('fingerprint')!r:.20}, now {fingerprint!r:.20}; exact resume "
                "needs the same ones (num_workers may differ)"
            )
        epoch, consumed = raw.get("epoch"), raw.get("batches_consumed")
        if not isinstance(epoch, int) or not isinstance(consumed, int) or epoch < 0 or consumed < 0:
            raise ValueError(f"bad epoch/batches_consumed in loader state: {epoch!r}, {consumed!r}")
        return cls(epoch=epoch, batches_consumed=consumed, fingerprint=fingerprint)
