"""One view per log entry, whatever its kind: the fields DumpLogSegments and the Kafka oracle print, and its records
as Kafka's deep iteration reports them (absolute offsets, effective timestamps, per-record CRCs of legacy messages).

Every uncompressed legacy message is its own log entry (Kafka's FileLogInputStream yields one batch per message),
although the reader groups consecutive ones into a ``LegacyRun``; ``entry_views`` splits them again. It is the one
place in ``dump`` that tells the entry kinds apart.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from migrate.format import legacy
from migrate.format.batch import V2Batch
from migrate.format.checksums import crc32
from migrate.format.entries import Entry
from migrate.format.records import Compression, Header, RecordColumns, TimestampType

NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
_UINT32 = struct.Struct(">I")
_TIMESTAMP_TYPES = {t.value: t for t in TimestampType}


@dataclass(frozen=True, slots=True)
class RecordView:
    """One record as Kafka's deep iteration reports it (absolute offset, effective timestamp)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = NO_SEQUENCE  # v2: base sequence + offset delta, -1 without an idempotent producer
    crc: int | None = None  # legacy: the (inner) message's own CRC-32; None for v2
    valid: bool = True  # legacy: the message's own CRC holds (Kafka's Record.isValid); always true for v2


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ is twice as slow, and there is one per entry
class EntryView:
    """One log entry (a v2 batch, a legacy compressed wrapper or an uncompressed legacy message) with the fields
    DumpLogSegments and the oracle print; ``records`` decodes its records on demand (only deep iteration needs
    them)."""

    position: int
    base_offset: int | None  # None: a legacy entry whose records could not be read (Kafka's baseOffset() throws)
    last_offset: int
    magic: int
    compression: Compression | None  # None: an unknown magic byte, nothing past the size field is readable
    timestamp_type: TimestampType
    max_timestamp: int
    size: int  # including the 12-byte offset+size prefix
    crc: int | None  # as stored in the entry, whether it holds or not; None: unknown magic
    count: int  # v2: the header's record count; legacy: the records read
    records: Callable[[], Iterator[RecordView]]
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    partition_leader_epoch: int = -1
    is_transactional: bool = False
    is_control: bool = False
    delete_horizon_ms: int | None = None
    decoded: bool = True  # False: only the header could be read, ``records`` yields nothing

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset - self.base_offset_or_last)

    @property
    def base_offset_or_last(self) -> int:
        return self.last_offset if self.base_offset is None else self.base_offset


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: producer sequences wrap from 2^31-1 to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def no_records() -> Iterator[RecordView]:
    """The records of a view whose entry could not be decoded."""
    return iter(())


def entry_views(items: Iterable[Entry], base: int = 0) -> Iterator[EntryView]:
    """One view per log entry, in file order (positions: as in the decoded buffer, plus ``base``)."""
    for item in items:
        yield from _VIEWS_BY_KIND[type(item)](item, base)


def _run_views(run: legacy.LegacyRun, base: int = 0) -> Iterator[EntryView]:
    cols = run.records
    # plain lists: indexing numpy arrays element by element costs more than the rest of a shallow dump
    positions, sizes, magics, crcs = (a.tolist() for a in (run.positions, run.sizes, run.magics, run.crcs))
    offsets, timestamps = cols.offsets.tolist(), cols.timestamps.tolist()
    types = [_TIMESTAMP_TYPES[t] for t in run.timestamp_types().tolist()]
    for j in range(len(positions)):
        yield EntryView(
            position=base + positions[j],
            base_offset=offsets[j],
            last_offset=offsets[j],
            magic=magics[j],
            compression=Compression.NONE,
            timestamp_type=types[j],
            max_timestamp=timestamps[j],
            size=sizes[j],
            crc=crcs[j],
            count=1,
            records=partial(_run_record, run, j),
        )


def _run_record(run: legacy.LegacyRun, j: int) -> Iterator[RecordView]:
    cols = run.records
    yield RecordView(int(cols.offsets[j]), int(cols.timestamps[j]), cols.key(j), cols.value(j), crc=int(run.crcs[j]))


def _wrapper_view(wrapper: legacy.LegacyWrapper, base: int = 0) -> EntryView:
    return EntryView(
        position=base + wrapper.position,
        base_offset=int(wrapper.records.offsets[0]),
        last_offset=wrapper.offset,
        magic=wrapper.magic,
        compression=wrapper.compression,
        timestamp_type=wrapper.timestamp_type,
        max_timestamp=wrapper.timestamp,
        size=wrapper.size,
        crc=wrapper.crc,
        count=len(wrapper.records),
        records=partial(_wrapper_records, wrapper),
    )


def _wrapper_records(wrapper: legacy.LegacyWrapper) -> Iterator[RecordView]:
    cols = wrapper.records
    for i in range(len(cols)):
        crc = inner_message_crc(cols, i, wrapper.magic)
        yield RecordView(int(cols.offsets[i]), int(cols.timestamps[i]), cols.key(i), cols.value(i), crc=crc)


def inner_message_crc(cols: RecordColumns, i: int, wrapper_magic: int) -> int | None:
    """The stored CRC-32 of a wrapper's ``i``-th inner message (Kafka prints it per record).

    The reader keeps no inner CRCs, so the message start is found back from where its key length sits (its offset
    from the start depends on the inner magic, normally the wrapper's); the candidate whose CRC checks is the one.
    """
    buf = cols.buffer
    key_length_at = int(cols.key_pos[i]) - 4
    message_end = int(cols.value_pos[i]) + max(int(cols.value_len[i]), 0)
    for magic in (wrapper_magic, 1 - wrapper_magic):
        start = key_length_at - legacy.KEY_LENGTH_OFFSET[magic]
        if start < 0 or buf[start + legacy.MAGIC_OFFSET] != magic:
            continue
        (stored,) = _UINT32.unpack_from(buf, start + legacy.CRC_OFFSET)
        if crc32(memoryview(buf)[start + legacy.MAGIC_OFFSET : message_end]) == stored:
            return int(stored)
    return None


def batch_view(batch: V2Batch, base: int = 0) -> EntryView:
    return EntryView(
        position=base + batch.position,
        base_offset=batch.base_offset,
        last_offset=batch.last_offset,
        magic=2,
        compression=batch.compression,
        timestamp_type=batch.timestamp_type,
        max_timestamp=batch.max_timestamp,
        size=batch.size,
        crc=batch.crc,
        count=batch.records_count,
        records=partial(_batch_records, batch),
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        delete_horizon_ms=batch.delete_horizon_ms,
    )


def _batch_records(batch: V2Batch) -> Iterator[RecordView]:
    cols = batch.records
    if cols is None:  # a header-only view of a batch that could not be decoded
        return
    headers = cols.headers
    base_sequence = batch.base_sequence
    for i in range(len(cols)):
        offset = int(cols.offsets[i])
        sequence = NO_SEQUENCE if base_sequence < 0 else increment_sequence(base_sequence, offset - batch.base_offset)
        yield RecordView(
            offset,
            int(cols.timestamps[i]),
            cols.key(i),
            cols.value(i),
            headers[i] if headers is not None else (),
            sequence,
        )


# each entry kind's views: a legacy run is one entry per message, every other kind is one entry
_VIEWS_BY_KIND: dict[type, Callable[[Any, int], Iterable[EntryView]]] = {
    legacy.LegacyRun: _run_views,
    legacy.LegacyWrapper: lambda wrapper, base: (_wrapper_view(wrapper, base),),
    V2Batch: lambda batch, base: (batch_view(batch, base),),
}
