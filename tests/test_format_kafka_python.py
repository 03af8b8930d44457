"""Our writers, judged by an independent Python reader: kafka-python's record classes (MemoryRecords,
LegacyRecordBatch, DefaultRecordBatch).

The files are the ones test_format_oracle.py hands to Kafka (every fixture segment rewritten in every magic, codec
and shape); here kafka-python must check every CRC (outer and inner) and read the same offsets, timestamps, keys,
values and headers, and the same batch fields our reader sees. Random records (hypothesis) go the same way.
"""

from __future__ import annotations

import pytest
from conftest import fixture_id
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatch
from test_format_oracle import TARGETS, session_copies
from test_format_roundtrip import record_lists

from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.entries import read_entries
from migrate.format.records import Compression, TimestampType

# one xdist worker: the rewritten fixtures are made once
pytestmark = pytest.mark.xdist_group("format_kafka_python")


def kafka_python_view(data: bytes) -> tuple[list[dict], list[tuple]]:
    """(batch fields, records) as kafka-python reads ``data``, every CRC checked."""
    batches, records = [], []
    memory = MemoryRecords(data)
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        if isinstance(batch, DefaultRecordBatch):
            batches.append(
                {
                    "offset": batch.base_offset,
                    "last": batch.last_offset,
                    "magic": batch.magic,
                    "codec": batch.compression_type,
                    "type": batch.timestamp_type,
                    "max": batch.max_timestamp,
                    "first": batch.first_timestamp,
                    "count": batch.records_count,
                    "producer": (batch.producer_id, batch.producer_epoch, batch.base_sequence),
                    "flags": (batch.is_transactional, batch.is_control_batch),
                    "epoch": batch.leader_epoch,
                    "crc": batch.crc,
                }
            )
        else:
            assert isinstance(batch, LegacyRecordBatch)
            batches.append(
                {
                    "offset": batch.base_offset,  # the entry's offset field
                    "magic": batch.magic,
                    "codec": batch.compression_type,
                    "type": batch.timestamp_type,
                    "size": batch.size_in_bytes,
                }
            )
        for r in batch:
            if isinstance(batch, LegacyRecordBatch):
                assert r.validate_crc()  # inner messages carry their own CRC
            ts = -1 if r.timestamp is None else r.timestamp
            records.append((r.offset, ts, r.key, r.value, tuple(r.headers)))
    assert memory.valid_bytes() == len(data)
    return batches, records


def our_view(data: bytes) -> list[dict]:
    """The same batch fields from our reader."""
    out = []
    for item in read_entries(data).items:
        if isinstance(item, legacy.LegacyRun):
            types = item.timestamp_types()
            for j in range(len(item)):
                magic = int(item.magics[j])
                out.append(
                    {
                        "offset": int(item.records.offsets[j]),
                        "magic": magic,
                        "codec": 0,
                        "type": None if magic == 0 else int(types[j]),
                        "size": int(item.sizes[j]),
                    }
                )
        elif isinstance(item, legacy.LegacyWrapper):
            out.append(
                {
                    "offset": item.offset,
                    "magic": item.magic,
                    "codec": int(item.compression),
                    "type": None if item.magic == 0 else int(item.timestamp_type),
                    "size": item.size,
                }
            )
        else:
            out.append(
                {
                    "offset": item.base_offset,
                    "last": item.last_offset,
                    "magic": v2.MAGIC,
                    "codec": int(item.compression),
                    "type": int(item.timestamp_type),
                    "max": item.max_timestamp,
                    "first": item.base_timestamp,
                    "count": item.records_count,
                    "producer": (item.producer_id, item.producer_epoch, item.base_sequence),
                    "flags": (item.is_transactional, item.is_control),
                    "epoch": item.partition_leader_epoch,
                    "crc": item.crc,
                }
            )
    return out


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    return session_copies(tmp_path_factory)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_kafka_python_reads_what_we_wrote(target, copies):
    mine = [c for c in copies if c.target == target]
    assert len(mine) >= 30
    for c in mine:
        data = c.path.read_bytes()
        batches, records = kafka_python_view(data)
        where = f"{target.name} {fixture_id(c.source)}"
        assert records == [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in c.records], where
        assert batches == our_view(data), where
        assert len(batches) == c.entries, where


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CREATE, APPEND = TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME


@pytest.mark.parametrize("magic", [0, 1, 2])
@SETTINGS
@given(data=st.data())
def test_kafka_python_reads_random_records(magic, data):
    """Null vs empty keys, values and header values, binary data, offset gaps, -1 and huge timestamps."""
    records = data.draw(record_lists(magic))
    # kafka-python adds timestamp deltas in Python ints; Kafka (Java longs) and we wrap them (test_format_oracle.py)
    assume(all(-(2**63) <= r.timestamp - records[0].timestamp < 2**63 for r in records))
    codec = data.draw(st.sampled_from([c for c in Compression if magic == 2 or c != Compression.ZSTD]))
    tstype = data.draw(st.sampled_from([CREATE, APPEND])) if magic else CREATE
    append_time = data.draw(st.integers(0, 2**62)) if tstype == APPEND else None
    if magic == 2:
        raw = v2.encode_batch(records, compression=codec, timestamp_type=tstype, log_append_time=append_time)
    elif codec == Compression.NONE:
        raw = legacy.encode_messages(records, magic, tstype)
        append_time = None  # uncompressed messages carry their own timestamps
    else:
        raw = legacy.encode_wrapper(records, magic, codec, tstype, append_time)
    batches, got = kafka_python_view(raw)
    want = [
        (r.offset, r.timestamp if append_time is None else append_time, r.key, r.value, tuple(r.headers))
        for r in records
    ]
    assert got == want
    assert batches == our_view(raw)
