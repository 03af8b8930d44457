"""A segment's swap files as the state database's ``swap`` column and the swap record hold them: one JSON list of
objects, one per file the swap replaces or adds::

    [{"suffix": ".log",                                  the file's suffix (.log, .index, .timeindex, ...)
      "original": {"inode": I, "size": S, "mtime_ns": M}, the live file before the swap (null: it did not exist)
      "output": {"inode": I, "size": S, "mtime_ns": M},   the staged file that replaces it
      "base_offset": B},                                  optional: a split source's later output's base offset
     ...]

Encoded and decoded by hand, not through ``migrate.codec``: status, rollback and every reconciliation read 10^6 of
them in one verb. The decoder is as strict as ``from_json``: a ModelError names where and what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from migrate.model.plan_tree import OMIT_IF_NONE
from migrate.model.run_state import FileStat
from migrate.run.swap_keys import swap_file_keys


@dataclass(frozen=True)
class SwapFile:
    """One file of a segment at swap time: what was live before (None: it did not exist) and what replaces it."""

    suffix: str
    original: FileStat | None
    output: FileStat
    # a split source's later output: the base offset naming its live file (None: the row's own segment); its
    # original is None, so a rollback removes it
    base_offset: int | None = field(default=None, metadata=OMIT_IF_NONE)


def _stat_json(st: FileStat | None) -> dict[str, int] | None:
    return None if st is None else {"inode": st.inode, "size": st.size, "mtime_ns": st.mtime_ns}


def swap_files_json(files: tuple[SwapFile, ...]) -> list[dict[str, Any]]:
    """``to_json`` of a segment's swap files, written out: the swap encodes one per segment file, 10^6 a run."""
    out = []
    for f in files:
        item: dict[str, Any] = {"suffix": f.suffix, "original": _stat_json(f.original), "output": _stat_json(f.output)}
        if f.base_offset is not None:
            item["base_offset"] = f.base_offset
        out.append(item)
    return out


def swap_text(files: tuple[SwapFile, ...]) -> str:
    """A segment's swap files as the state database and the swap record hold them (``begin_swap``,
    ``migrate.run.swap_record.record_text_of``): encoded once for both."""
    return json.dumps(swap_files_json(files), separators=(",", ":"))


def swap_files_from_json(data: Any, where: str) -> tuple[SwapFile, ...]:
    """``from_json(tuple[SwapFile, ...], data)`` as strict, written out for speed: ``swap_file_keys``' checks (one
    decoder, so the typed records and the tuples that status, rollback and every reconciliation compare accept and
    refuse the same data with the same ModelError, naming ``where``), as records."""
    return tuple(
        SwapFile(suffix, None if before is None else FileStat(*before), FileStat(*output), base)
        for suffix, base, before, output in swap_file_keys(data, where)
    )
