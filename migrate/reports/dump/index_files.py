"""What ``dump`` does with index files (``.index``, ``.timeindex``): their entries as DumpLogSegments prints them,
its checks against the ``.log`` beside them (``--verify-index-only``), and a sanity check
(``--index-sanity-check``) that names every bad entry where Kafka's only says that the file is corrupt.

The entry layouts are the index modules' own (``migrate.segment.offset_index``, ``migrate.segment.time_index``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from migrate.format.records import NO_TIMESTAMP
from migrate.reports.dump.log_read import LogRead
from migrate.reports.dump.views import EntryView
from migrate.segment import offset_index, time_index

# DumpLogSegments' headings for the problems it reports on stderr after all files (ours name the file the same way)
OFFSET_MISMATCH = "Mismatches in :"
TIME_MISMATCH = "Found timestamp mismatch in :"
TIME_OUT_OF_ORDER = "Found out of order timestamp in :"
NOT_FOUND = "The following indexed offsets are not found in the log :"
CORRUPT = "Corrupt index entries in :"  # ours: what Kafka's sanityCheck would throw on, and more, entry by entry


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    entry: int  # slot number, from 0 (Kafka's OffsetIndex.entry(n))
    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimeEntry:
    entry: int
    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class IndexProblem:
    """One thing wrong with an index file, naming the entry (slot number and byte in the index file)."""

    heading: str  # which of DumpLogSegments' groups it is reported under
    entry: int | None  # None: the file as a whole
    byte: int  # where in the index file
    text: str  # one line; names the entry


def offset_index_entries(data: bytes, base_offset: int) -> list[OffsetEntry]:
    """The entries DumpLogSegments prints: ``len // 8`` slots (Kafka ignores a cut last entry), up to the first slot
    after slot 0 that holds the base offset (the zero-filled preallocated rest of an active segment's index)."""
    offsets, positions = _offset_slots(data, base_offset, len(data) // offset_index.ENTRY_SIZE)
    entries = []
    for i, (offset, position) in enumerate(zip(offsets, positions)):
        if offset == base_offset and i > 0:
            break
        entries.append(OffsetEntry(i, offset, position))
    return entries


def time_index_entries(data: bytes, base_offset: int) -> list[TimeEntry]:
    """The entries DumpLogSegments prints: ``len // 12`` slots, up to the first slot after slot 0 that holds the
    base offset (zero-filled preallocated space)."""
    timestamps, offsets = _time_slots(data, base_offset, len(data) // time_index.ENTRY_SIZE)
    entries = []
    for i, (timestamp, offset) in enumerate(zip(timestamps, offsets)):
        if offset == base_offset and i > 0:
            break
        entries.append(TimeEntry(i, timestamp, offset))
    return entries


def _offset_slots(data: bytes, base_offset: int, slots: int) -> tuple[list[int], list[int]]:
    """(offsets, positions) of the first ``slots`` entries of an offset index."""
    offsets, positions = offset_index.decode(data[: slots * offset_index.ENTRY_SIZE], base_offset)
    return offsets.tolist(), positions.tolist()


def _time_slots(data: bytes, base_offset: int, slots: int) -> tuple[list[int], list[int]]:
    """(timestamps, offsets) of the first ``slots`` entries of a time index."""
    timestamps, offsets = time_index.decode(data[: slots * time_index.ENTRY_SIZE], base_offset)
    return timestamps.tolist(), offsets.tolist()


def offset_index_text(entry: OffsetEntry) -> str:
    return f"offset: {entry.offset} position: {entry.position}"


def time_index_text(entry: TimeEntry) -> str:
    return f"timestamp: {entry.timestamp} offset: {entry.offset}"


def offset_index_json(entry: OffsetEntry) -> dict[str, Any]:
    return {"type": "index", "entry": entry.entry, "offset": entry.offset, "position": entry.position}


def time_index_json(entry: TimeEntry) -> dict[str, Any]:
    return {"type": "timeindex", "entry": entry.entry, "timestamp": entry.timestamp, "offset": entry.offset}


def problem_json(problem: IndexProblem) -> dict[str, Any]:
    return {"type": "problem", "entry": problem.entry, "byte": problem.byte, "error": problem.text}


def offset_index_sanity(data: bytes, base_offset: int) -> list[IndexProblem]:
    """What ``--index-sanity-check`` finds in a ``.index``, entry by entry, without reading the log.

    Kafka's OffsetIndex.sanityCheck fails a file whose length is not a multiple of 8 or whose last offset is below
    the base offset. The broker's lookups (a binary search) also need offsets and positions that strictly increase,
    so every entry is held to that too: an index that breaks it sends fetches to the wrong place.
    """
    size = offset_index.ENTRY_SIZE
    problems = _cut_entry(data, size, "offset index")
    previous: tuple[int, int, int] | None = None  # entry, offset, position
    for i, (offset, position) in enumerate(zip(*_offset_slots(data, base_offset, _slots_in_use(data, size)))):
        where = f"entry {i} at byte {i * size}"
        if offset < base_offset:
            problems.append(_corrupt(i, size, f"{where}: offset {offset} is below the base offset {base_offset}"))
        if position < 0:
            problems.append(_corrupt(i, size, f"{where}: position {position} is negative"))
        if previous is not None:
            j, previous_offset, previous_position = previous
            if offset <= previous_offset:
                text = f"{where}: offset {offset} does not increase on entry {j}'s offset {previous_offset}"
                problems.append(_corrupt(i, size, text))
            if position <= previous_position:
                text = f"{where}: position {position} does not increase on entry {j}'s position {previous_position}"
                problems.append(_corrupt(i, size, text))
        previous = (i, offset, position)
    return problems


def time_index_sanity(data: bytes, base_offset: int) -> list[IndexProblem]:
    """What ``--index-sanity-check`` finds in a ``.timeindex``, entry by entry, without reading the log.

    Kafka's TimeIndex.sanityCheck fails a file whose length is not a multiple of 12, whose last timestamp is below
    its first or whose last offset is below the base offset. TimeIndex.maybeAppend only ever appends a larger
    timestamp at an offset no smaller than the last, so every entry is held to that as well.
    """
    size = time_index.ENTRY_SIZE
    problems = _cut_entry(data, size, "time index")
    previous: tuple[int, int, int] | None = None  # entry, timestamp, offset
    for i, (timestamp, offset) in enumerate(zip(*_time_slots(data, base_offset, _slots_in_use(data, size)))):
        where = f"entry {i} at byte {i * size}"
        if offset < base_offset:
            problems.append(_corrupt(i, size, f"{where}: offset {offset} is below the base offset {base_offset}"))
        if previous is not None:
            j, previous_timestamp, previous_offset = previous
            if timestamp <= previous_timestamp:
                problems.append(
                    IndexProblem(
                        TIME_OUT_OF_ORDER,
                        i,
                        i * size,
                        f"Index timestamp: {timestamp}, Previously indexed timestamp: {previous_timestamp} "
                        f"({where}, previous: entry {j})",
                    )
                )
            if offset < previous_offset:
                problems.append(
                    _corrupt(i, size, f"{where}: offset {offset} is below entry {j}'s offset {previous_offset}")
                )
        previous = (i, timestamp, offset)
    return problems


def _slots_in_use(data: bytes, size: int) -> int:
    """Complete slots, without a zero-filled preallocated rest (slot 0 always counts: it may hold the base offset at
    position 0, which is all zeros).

    Kafka's dump stops at the first slot after slot 0 whose relative offset is 0; here only where every byte from
    there on is zero, so that one zeroed entry in the middle of an index is reported, not taken for its end.
    """
    slots = len(data) // size
    if slots == 0:
        return 0
    written = len(bytes(data[: slots * size]).rstrip(b"\0"))
    return max(-(-written // size), 1)


def _cut_entry(data: bytes, size: int, what: str) -> list[IndexProblem]:
    cut = len(data) % size
    if not cut:
        return []
    slot = len(data) // size
    return [
        IndexProblem(
            CORRUPT,
            slot,
            slot * size,
            f"entry {slot} at byte {slot * size} is cut: the {what} is {len(data)} bytes, not a multiple of {size} "
            f"({cut} of the entry's {size} bytes are present)",
        )
    ]


def _corrupt(entry: int, size: int, text: str) -> IndexProblem:
    return IndexProblem(CORRUPT, entry, entry * size, text)


@dataclass(frozen=True, slots=True)
class LogLayout:
    """Where each entry of a ``.log`` starts and its last offset: what the index checks compare against."""

    name: str  # the .log's file name, for messages
    size: int  # bytes read
    positions: list[int]
    entries: list[EntryView]

    @classmethod
    def of(cls, name: str, size: int, read: LogRead) -> LogLayout:
        views = [view for view, _ in read.views()]
        return cls(name, size, [v.position for v in views], views)

    def at(self, position: int) -> EntryView | None:
        i = bisect.bisect_left(self.positions, position)
        return self.entries[i] if i < len(self.positions) and self.positions[i] == position else None


def verify_offset_index(entries: list[OffsetEntry], log: LogLayout) -> list[IndexProblem]:
    """DumpLogSegments' offset index check: the entry at each indexed position must have the indexed offset as its
    last offset. A position that is not where an entry starts is reported too (Kafka's tool reads garbage there, or
    throws past the end of the log)."""
    size = offset_index.ENTRY_SIZE
    problems = []
    for e in entries:
        where = f"entry {e.entry} at byte {e.entry * size}"
        entry = log.at(e.position)
        if entry is None:
            if e.position >= log.size:
                text = (
                    f"{where}: offset {e.offset} at position {e.position}, beyond the end of {log.name} "
                    f"({log.size} bytes)"
                )
            else:
                before = bisect.bisect_right(log.positions, e.position) - 1
                start = log.positions[before] if before >= 0 else 0
                text = (
                    f"{where}: offset {e.offset} at position {e.position}, which is not where an entry of {log.name} "
                    f"starts (the entry around it starts at {start})"
                )
            problems.append(IndexProblem(OFFSET_MISMATCH, e.entry, e.entry * size, text))
        elif entry.last_offset != e.offset:
            problems.append(
                IndexProblem(
                    OFFSET_MISMATCH,
                    e.entry,
                    e.entry * size,
                    f"Index offset: {e.offset}, log offset: {entry.last_offset} ({where}, position {e.position})",
                )
            )
    return problems


def verify_time_index(
    entries: list[TimeEntry], offset_entries: list[OffsetEntry], log: LogLayout
) -> list[IndexProblem]:
    """DumpLogSegments' time index check: from the offset index's position for each entry's offset, the first log
    entry whose last offset reaches it must end exactly at that offset, and the largest record timestamp in it must
    be the indexed timestamp. (The order of timestamps is ``time_index_sanity``'s.)"""
    size = time_index.ENTRY_SIZE
    indexed = [e.offset for e in offset_entries]
    problems = []
    for e in entries:
        where = f"entry {e.entry} at byte {e.entry * size}"
        slot = bisect.bisect_right(indexed, e.offset) - 1
        start = offset_entries[slot].position if slot >= 0 else 0  # Kafka's OffsetIndex.lookup
        i = bisect.bisect_left(log.positions, start)
        found = next((v for v in log.entries[i:] if v.last_offset >= e.offset), None)
        if found is None or found.last_offset != e.offset:
            log_offset = -1 if found is None else found.last_offset
            text = f"Indexed offset: {e.offset}, found log offset: {log_offset} ({where}, timestamp {e.timestamp})"
            problems.append(IndexProblem(NOT_FOUND, e.entry, e.entry * size, text))
            continue
        max_timestamp = max((r.timestamp for r in found.records()), default=NO_TIMESTAMP)
        if max_timestamp != e.timestamp:
            problems.append(
                IndexProblem(
                    TIME_MISMATCH,
                    e.entry,
                    e.entry * size,
                    f"Index timestamp: {e.timestamp}, log timestamp: {max_timestamp} ({where}, offset {e.offset}, "
                    f"log position {found.position})",
                )
            )
    return problems


def problem_blocks(path: str, problems: list[IndexProblem]) -> list[str]:
    """DumpLogSegments' stderr report for one file: a heading per kind of problem, then its lines indented."""
    lines = []
    in_file_order = sorted(problems, key=lambda p: p.byte)
    for heading in dict.fromkeys(p.heading for p in in_file_order):
        lines.append(f"{heading}{path}")
        lines += [f"  {p.text}" for p in in_file_order if p.heading == heading]
    return lines
