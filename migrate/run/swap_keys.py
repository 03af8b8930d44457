"""Swap files as plain tuples: the identities a swap, a rollback and every classification of a partition by its files
compare, 10^5-10^6 times in one verb, without a SwapFile and two FileStats per file (``migrate.run.swap_json`` keeps the
typed records and builds them from this module's decoder: one strict check of the same JSON for both).
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from migrate.errors import ModelError
from migrate.model.run_state import FileStat

# a file's identity as a plain tuple (inode, size, mtime_ns): what a FileStat compares, without building one. The
# classifications of 10^6 files (status, every reconciliation, rollback's checks) compare these with os.stat results
StatKey = tuple[int, int, int]
# one swap file as StatKeys: (suffix, base_offset or None, original or None, output)
SwapFileKey = tuple[str, "int | None", "StatKey | None", StatKey]


_SWAP_FILE_KEYS = frozenset(("suffix", "original", "output", "base_offset"))
_SWAP_FILE_REQUIRED = frozenset(("suffix", "original", "output"))
_STAT_KEYS = frozenset(("inode", "size", "mtime_ns"))


def _bad_swap_file(where: str, i: int, item: Any) -> ModelError:
    return ModelError(
        f"{where}[{i}]: expected a swap file (suffix, original and output: objects of inode, size and mtime_ns, "
        f"base_offset), found {item!r}"
    )


def stat_key(st: FileStat | None) -> StatKey | None:
    return None if st is None else (st.inode, st.size, st.mtime_ns)


def _key_from(data: Any) -> StatKey | None:
    """``_stat_from`` as a StatKey."""
    if type(data) is dict and data.keys() == _STAT_KEYS:
        inode, size, mtime = data["inode"], data["size"], data["mtime_ns"]
        if type(inode) is int and type(size) is int and type(mtime) is int:
            return inode, size, mtime
    return None


_NUM = r"(-?(?:0|[1-9][0-9]*))"
_STAT_TEXT = r'\{"inode":' + _NUM + r',"size":' + _NUM + r',"mtime_ns":' + _NUM + r"\}"
_FILE_TEXT = (
    r'\{"suffix":"([A-Za-z0-9._-]*)","original":(?:null|'
    + _STAT_TEXT
    + r'),"output":'
    + _STAT_TEXT
    # base_offset last: swap_files_json's key order
    + r'(?:,"base_offset":'
    + _NUM
    + r")?\}"
)
_FILE_RE = re.compile(_FILE_TEXT)
_FILES_RE = re.compile(r"\[(?:" + _FILE_TEXT.replace("(", "(?:").replace("(?:?:", "(?:") + r"(?:,(?=\{)|(?=\])))*\]")


# a segment's usual swap: three files (.log, .index, .timeindex), matched and read in one pass
_THREE_FILES_RE = re.compile(r"\[" + _FILE_TEXT + "," + _FILE_TEXT + "," + _FILE_TEXT + r"\]")


def _file_key(suffix: str, i0: str, s0: str, m0: str, i1: str, s1: str, m1: str, base: str) -> SwapFileKey:
    return suffix, int(base) if base else None, (int(i0), int(s0), int(m0)) if i0 else None, (int(i1), int(s1), int(m1))


def swap_file_keys_of(text: str, where: str) -> tuple[SwapFileKey, ...]:
    """``swap_file_keys(json.loads(text))`` for a swap column as ``swap_files_json`` and ``_dumps`` write it (the
    whole text must be exactly that form, integers as JSON writes them): read with regular expressions instead of a
    JSON decode and a check of every object; any other text is decoded and checked as JSON."""
    m = _THREE_FILES_RE.fullmatch(text)
    if m is not None:
        g = m.groups()
        return _file_key(*g[:8]), _file_key(*g[8:16]), _file_key(*g[16:])
    if _FILES_RE.fullmatch(text) is None:
        return swap_file_keys(json.loads(text), where)
    return tuple(_file_key(*g) for g in _FILE_RE.findall(text))


def swap_file_keys(data: Any, where: str) -> tuple[SwapFileKey, ...]:
    """``swap_files_from_json`` as StatKey tuples, exactly as strict (the same ModelError for the same data): what
    classifying a partition by its files needs, without a SwapFile and two FileStats per file."""
    if type(data) is not list:
        raise ModelError(f"{where}: expected a list of swap files, found {type(data).__name__}")
    out = []
    for i, item in enumerate(data):
        if type(item) is dict and _SWAP_FILE_REQUIRED <= item.keys() <= _SWAP_FILE_KEYS:
            suffix, original, base = item["suffix"], item["original"], item.get("base_offset")
            before = None if original is None else _key_from(original)
            output = _key_from(item["output"])
            if (
                type(suffix) is str
                and output is not None
                and (before is not None or original is None)
                and (base is None or type(base) is int)
            ):
                out.append((suffix, base, before, output))
                continue
        raise _bad_swap_file(where, i, item)
    return tuple(out)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a loop over 10^5-10^6 files that makes many small objects and no cycle:
    each of its collections would walk the whole heap (the plan's every segment), several seconds of a status or a
    swap at 10^5 segments. Reference counting frees everything as before; the collector is back on afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _stat_text(k: StatKey) -> str:
    return f'{{"inode":{k[0]},"size":{k[1]},"mtime_ns":{k[2]}}}'


def swap_keys_text(files: tuple[SwapFileKey, ...]) -> str:
    """``swap_text`` of swap files as StatKeys: the same bytes, written without a dict per file."""
    dumps = json.dumps
    items = []
    for suffix, base, original, output in files:
        before = "null" if original is None else _stat_text(original)
        tail = "" if base is None else f',"base_offset":{base}'
        items.append(f'{{"suffix":{dumps(suffix)},"original":{before},"output":{_stat_text(output)}{tail}}}')
    return f"[{','.join(items)}]"
