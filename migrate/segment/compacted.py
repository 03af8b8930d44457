"""A compacted partition's pass two, as the conversion of one segment sees it: which records survive.

The compact stage computes a partition's survivors once (``migrate.compaction.pass_one``) and saves them; each
segment's conversion then keeps only the survivors among its entries' records. Survivors keep their offsets and
dropped records leave gaps, as Kafka's cleaner does; a v2 batch that lost records is rebuilt
(``V2Batch.rebuild``), never copied.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from migrate.format.entries import Entry


def load_survivors(path: str | Path) -> np.ndarray:
    """The survivors file the compact stage wrote, memory-mapped (a segment probes only its own range)."""
    return np.load(path, mmap_mode="r", allow_pickle=False)


def kept_mask(offsets: np.ndarray, survivors: np.ndarray) -> np.ndarray:
    """Which of ``offsets`` are survivors (``survivors`` sorted; a memory map is fine: only the probed pages load)."""
    if not len(survivors) or not len(offsets):
        return np.zeros(len(offsets), bool)
    at = np.minimum(np.searchsorted(survivors, offsets), len(survivors) - 1)
    return np.asarray(survivors[at]) == offsets


def retained(item: Entry, survivors: np.ndarray) -> Entry | None:
    """The entry with only its surviving records: None when none survives, the entry itself when all do."""
    cols = item.records
    assert cols is not None
    if not len(cols):
        return item  # an empty v2 batch (a producer's retained state) is not ours to drop
    keep = kept_mask(cols.offsets, survivors)
    if keep.all():
        return item
    if not keep.any():
        return None
    return item.retain(keep)
