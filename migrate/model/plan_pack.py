"""A plan's columns as the driver sends them to its workers (a Dask scatter pickles the plan, Spark's broadcast too).

    pickle of (rows, names, ints, extra):
      rows   int                          segments in the table
      names  {column: (values, frame)}    a name column's dictionary, and a zstd frame of its int32 codes
      ints   {column: frame}              a zstd frame of the int64 differences of an int column's values, first
                                          value first (uint64 inode viewed as int64; the sum wraps back exactly)
      extra  {row: SegmentExtra JSON}     the rows that have any

About 9 bytes a segment. Not the plan file's Parquet: decoding that would import pyarrow into every worker (31 MB of
each worker's memory for this alone); zstandard and numpy are imported there anyway. The driver checked the columns
against the plan's id; a worker only unpacks them.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import zstandard

from migrate.errors import ModelError

Names = dict[str, tuple[list[str], np.ndarray]]
Kinds = Sequence[tuple[str, Any]]  # (int column, its dtype), in the table's order


def pack_columns(names: Names, ints: dict[str, np.ndarray], extra: dict[int, str], kinds: Kinds) -> bytes:
    """The columns as a pickle of zstd frames, one per column: each int column as the int64 differences of its
    values (a partition's offsets, inodes and mtimes step by little: they compress to a few bits a row), each name
    column as its dictionary and codes, the extra rows as they are. A column at a time, so the driver's memory grows
    by about two columns' arrays while it packs, not by the whole table."""
    compressor = zstandard.ZstdCompressor(level=3)
    frames = {}
    rows = 0
    for column, kind in kinds:
        values = ints[column]
        rows = len(values)
        wide = values.view(np.int64) if np.dtype(kind) == np.uint64 else values.astype(np.int64, copy=False)
        steps = np.empty_like(wide)
        steps[:1] = wide[:1]
        np.subtract(wide[1:], wide[:-1], out=steps[1:])  # wraps as the cumulative sum unwraps
        frames[column] = compressor.compress(steps.data.cast("B"))
    coded = {
        c: (values, compressor.compress(np.ascontiguousarray(codes, np.int32).data.cast("B")))
        for c, (values, codes) in names.items()
    }
    return pickle.dumps((rows, coded, frames, extra), protocol=pickle.HIGHEST_PROTOCOL)


def unpack_columns(packed: bytes, kinds: Kinds) -> tuple[Names, dict[str, np.ndarray], dict[int, str]]:
    """``pack_columns``'s (names, ints, extra) (sent by this tool's driver to its own workers: never a file's
    bytes)."""
    rows, coded, frames, extra = pickle.loads(packed)
    decompressor = zstandard.ZstdDecompressor()
    ints: dict[str, np.ndarray] = {}
    for column, kind in kinds:
        steps = np.frombuffer(decompressor.decompress(frames[column]), np.int64)
        wide = np.cumsum(steps, dtype=np.int64)
        ints[column] = wide.view(np.uint64) if np.dtype(kind) == np.uint64 else wide.astype(kind, copy=False)
        if len(ints[column]) != rows:
            raise ModelError(f"packed plan column {column} of {len(ints[column])} rows, {rows} were sent")
    names = {
        c: (values, np.frombuffer(decompressor.decompress(raw), np.int32).copy()) for c, (values, raw) in coded.items()
    }
    return names, ints, extra
