"""Packing: documents from the bounded shuffle buffer into rows of ``max_seq_len`` tokens.

Each row starts with a random document of the buffer and is then filled best-fit: the
longest buffered document that still fits, until none does. The buffer is refilled before
every row, so rows stay nearly full until the epoch's last few. A batch holds
``max_tokens // padded(max_seq_len)`` rows, every row padded to ``max_seq_len``.
"""

from __future__ import annotations

import numpy as np

from dataforge.loader.batching import SortedBuffer, refill_buffer
from dataforge.loader.config import LoaderConfig

__all__ = ["plan_packed"]


def plan_packed(
    ids: np.ndarray, lens: np.ndarray, config: LoaderConfig, rng: np.random.Generator
) -> list[list[list[int]]]:
    """Pack samples (read order ``ids``, lengths ``lens`` <= max_seq_len) into batches of rows."""
    row_capacity = config.max_seq_len
    rows_per_batch = config.max_tokens // config.padded_len(row_capacity)
    buf = SortedBuffer()
    pos, batches, rows = 0, [], []
    while True:
        pos = refill_buffer(buf, ids, lens, pos, config.shuffle_buffer, rng, config.shuffle)
        if not len(buf):
            break
        anchor = int(rng.integers(len(buf))) if config.shuffle else len(buf) - 1
        space = row_capacity - int(buf.lens[anchor])
        row = [int(buf.pop_range(anchor, anchor + 1)[0])]
        while space > 0 and len(buf):
            fit = int(np.searchsorted(buf.lens, space, side="right")) - 1
            if fit < 0:
                break
            space -= int(buf.lens[fit])
            row.append(int(buf.pop_range(fit, fit + 1)[0]))
        rows.append(row)
        if len(rows) == rows_per_batch:
            batches.append(rows)
            rows = []
    if rows:
        batches.append(rows)
    return batches
