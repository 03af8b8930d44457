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

from migrate.errors import ModelError
from migrate.model.plan_tree import OMIT_IF_NONE
from migrate.model.run_state import FileStat


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


_SWAP_FILE_KEYS = frozenset(("suffix", "original", "output", "base_offset"))
_SWAP_FILE_REQUIRED = frozenset(("suffix", "original", "output"))
_STAT_KEYS = frozenset(("inode", "size", "mtime_ns"))


def _stat_from(data: Any) -> FileStat | None:
    """A FileStat from its JSON object, None where it is not one (the caller names where)."""
    if type(data) is dict and data.keys() == _STAT_KEYS:
        inode, size, mtime = data["inode"], data["size"], data["mtime_ns"]
        if type(inode) is int and type(size) is int and type(mtime) is int:
            return FileStat(inode, size, mtime)
    return None


def swap_files_from_json(data: Any, where: str) -> tuple[SwapFile, ...]:
    """``from_json(tuple[SwapFile, ...], data)`` as strict, written out for speed (read by the 10^6 in status,
    rollback and every reconciliation); a ModelError names ``where`` and what is wrong."""
    if type(data) is not list:
        raise ModelError(f"{where}: expected a list of swap files, found {type(data).__name__}")
    out = []
    for i, item in enumerate(data):
        if type(item) is dict and _SWAP_FILE_REQUIRED <= item.keys() <= _SWAP_FILE_KEYS:
            suffix, original, base = item["suffix"], item["original"], item.get("base_offset")
            before = None if original is None else _stat_from(original)
            output = _stat_from(item["output"])
            if (
                type(suffix) is str
                and output is not None
                and (before is not None or original is None)
                and (base is None or type(base) is int)
            ):
                out.append(SwapFile(suffix, before, output, base))
                continue
        raise _bad_swap_file(where, i, item)
    return tuple(out)


def _bad_swap_file(where: str, i: int, item: Any) -> ModelError:
    return ModelError(
        f"{where}[{i}]: expected a swap file (suffix, original and output: objects of inode, size and mtime_ns, "
        f"base_offset), found {item!r}"
    )
