"""A segment's files as one record: a field per file, as Kafka's ``LogSegment`` holds its log, offset index, time
index and transaction index (``LogSegment(FileRecords log, LazyIndex<OffsetIndex> lazyOffsetIndex,
LazyIndex<TimeIndex> lazyTimeIndex, TransactionIndex txnIndex, ...)``).

``SegmentFiles[T]`` holds one value per ``FileKind`` a segment has (a staged path, a ``FileStat``, an edges digest),
None where it has none. Its wire form is the JSON object the state database, the staged records and the staged index
have always held, keyed by suffix in ``FileKind`` order (``{".log": ..., ".index": ..., ".timeindex": ...}``):
``migrate.codec`` writes and reads it through ``__to_wire__``/``__from_wire__``, so a result written before this
record existed reads back into it and is written again byte for byte.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from migrate.kafka.names import FileKind, segment_name

T = TypeVar("T")
U = TypeVar("U")

_SUFFIXES_SHOWN = tuple(kind.value for kind in FileKind)
_SUFFIXES = frozenset(_SUFFIXES_SHOWN)


@dataclass(frozen=True, slots=True)
class SegmentFiles(Generic[T]):
    """One value per file of a segment, by ``FileKind`` (None: the segment has no such file here)."""

    log: T | None = None
    index: T | None = None
    time_index: T | None = None
    txn_index: T | None = None

    def get(self, kind: FileKind) -> T | None:
        if kind is FileKind.LOG:
            return self.log
        if kind is FileKind.INDEX:
            return self.index
        if kind is FileKind.TIME_INDEX:
            return self.time_index
        if kind is FileKind.TXN_INDEX:
            return self.txn_index
        raise TypeError(f"{kind!r} is not a FileKind")

    def __iter__(self) -> Iterator[tuple[FileKind, T]]:
        """(kind, value) of every file present, in ``FileKind`` order."""
        if self.log is not None:
            yield FileKind.LOG, self.log
        if self.index is not None:
            yield FileKind.INDEX, self.index
        if self.time_index is not None:
            yield FileKind.TIME_INDEX, self.time_index
        if self.txn_index is not None:
            yield FileKind.TXN_INDEX, self.txn_index

    def __bool__(self) -> bool:
        return not (self.log is None and self.index is None and self.time_index is None and self.txn_index is None)

    def __len__(self) -> int:
        return (
            (self.log is not None)
            + (self.index is not None)
            + (self.time_index is not None)
            + (self.txn_index is not None)
        )

    def require(self, kind: FileKind) -> T:
        """``kind``'s value, where the segment must have that file (KeyError naming its suffix where it has none)."""
        value = self.get(kind)
        if value is None:
            raise KeyError(kind.value)
        return value

    __getitem__ = require

    def kinds(self) -> tuple[FileKind, ...]:
        return tuple(kind for kind, _ in self)

    keys = kinds  # with __getitem__, what dict() reads: ``dict(files)`` is {kind: value}

    def values(self) -> list[T]:
        return [value for _, value in self]

    def items(self) -> list[tuple[FileKind, T]]:
        """(kind, value) of every file present, in ``FileKind`` order (what iterating gives)."""
        return list(self)

    def with_file(self, kind: FileKind, value: T | None) -> SegmentFiles[T]:
        """This record with ``kind``'s file set to ``value`` (None: taken out)."""
        log, index, time_index, txn_index = self.log, self.index, self.time_index, self.txn_index
        if kind is FileKind.LOG:
            log = value
        elif kind is FileKind.INDEX:
            index = value
        elif kind is FileKind.TIME_INDEX:
            time_index = value
        elif kind is FileKind.TXN_INDEX:
            txn_index = value
        else:
            raise TypeError(f"{kind!r} is not a FileKind")
        return SegmentFiles(log, index, time_index, txn_index)

    def map(self, fn: Callable[[FileKind, T], U]) -> SegmentFiles[U]:
        """``fn(kind, value)`` of every file present, under the same kinds."""
        return SegmentFiles(
            None if self.log is None else fn(FileKind.LOG, self.log),
            None if self.index is None else fn(FileKind.INDEX, self.index),
            None if self.time_index is None else fn(FileKind.TIME_INDEX, self.time_index),
            None if self.txn_index is None else fn(FileKind.TXN_INDEX, self.txn_index),
        )

    def paths_in(self, directory: str, base_offset: int) -> SegmentFiles[str]:
        """Where the files present are named in ``directory``, as the segment of ``base_offset``'s (plain strings:
        a verify names 10^5-10^6 segments' live files)."""
        prefix = os.path.join(directory, "")
        return self.map(lambda kind, _: prefix + segment_name(base_offset, kind))

    @classmethod
    def of(cls, pairs: Iterable[tuple[FileKind, T]]) -> SegmentFiles[T]:
        """The record of (kind, value) pairs, in any order (a kind named twice: the last value)."""
        values: dict[FileKind, T] = dict(pairs)
        get = values.get
        return cls(get(FileKind.LOG), get(FileKind.INDEX), get(FileKind.TIME_INDEX), get(FileKind.TXN_INDEX))

    @classmethod
    def by_suffix(cls, mapping: Mapping[str, T]) -> SegmentFiles[T]:
        """The record of a ``{suffix: value}`` mapping (its wire form); ValueError names a key that is no segment
        file's suffix."""
        get = mapping.get
        log, index, time_index, txn_index = get(".log"), get(".index"), get(".timeindex"), get(".txnindex")
        # every key is a suffix when the values found are all the keys (a value is never None on the wire)
        found = (log is not None) + (index is not None) + (time_index is not None) + (txn_index is not None)
        if found != len(mapping):
            unknown = sorted(set(mapping) - _SUFFIXES)
            if unknown:
                known = ", ".join(_SUFFIXES_SHOWN)
                raise ValueError(f"{unknown[0]!r} is not the suffix of a segment's file (known: {known})")
            raise ValueError("a segment's file is null")
        return cls(log, index, time_index, txn_index)

    def suffixes(self) -> dict[str, T]:
        """The ``{suffix: value}`` mapping of the files present, in ``FileKind`` order: the wire form."""
        out: dict[str, T] = {}
        if self.log is not None:
            out[".log"] = self.log
        if self.index is not None:
            out[".index"] = self.index
        if self.time_index is not None:
            out[".timeindex"] = self.time_index
        if self.txn_index is not None:
            out[".txnindex"] = self.txn_index
        return out

    # --- the codec's hooks (migrate.codec): written and read as the suffix-keyed object ---------------------------

    def __to_wire__(self) -> dict[str, T]:
        return self.suffixes()

    __from_wire__ = by_suffix

    @staticmethod
    def __wire_type__(*args: Any) -> Any:
        """The JSON form of ``SegmentFiles[X]``: an object of suffix keys and X values."""
        (value,) = args or (Any,)
        return dict[str, value]  # type: ignore[valid-type]


# no file at all: the default of a record's SegmentFiles field (immutable, so one instance serves every record)
NO_FILES: SegmentFiles[Any] = SegmentFiles()
