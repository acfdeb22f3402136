"""Length-bucketed, token-budget streaming loader over MDS shards (pretrain, SFT, DPO).

Usage::

    from dataforge.loader import build_dataloader, LoaderConfig
    loader = build_dataloader(LoaderConfig(streams=[{"path": "out/demo/mds"}], mode="pretrain"))
    for batch in loader: ...

See docs/loader.md for the record schema of each mode and the batch keys.
"""

from dataforge.loader.collate import IGNORE_INDEX
from dataforge.loader.config import MODE_COLUMNS, LoaderConfig, StreamSpec
from dataforge.loader.loader import DataforgeLoader, build_dataloader

__all__ = [
    "IGNORE_INDEX",
    "MODE_COLUMNS",
    "DataforgeLoader",
    "LoaderConfig",
    "StreamSpec",
    "build_dataloader",
]
