"""The C accelerator (migrate/format/_speedups.c) and its Python reference twins give identical results, and the
package's one switch (KAFKA_LOG_MIGRATE_NO_EXTENSIONS, migrate.format.accel) turns it off everywhere."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from conftest import FIXTURE_SEGMENTS, REPO, VALID_FIXTURE_SEGMENTS, fixture_id
from hypothesis import given, settings
from hypothesis import strategies as st

from migrate.errors import CorruptRecordError
from migrate.format import accel, checksums, entries, legacy
from migrate.format import batch as v2
from migrate.format.buffers import int64_column
from migrate.format.digest import LogDigest
from migrate.format.records import Record, RecordColumns, TimestampType

speedups = accel.speedups
pytestmark = pytest.mark.skipif(speedups is None, reason=f"C accelerator not in use: {accel.status().reason}")


def test_status_names_the_accelerator_in_use():
    assert accel.status() == accel.Status(True, "C accelerator built and enabled")
    assert dataclasses.asdict(accel.status()) == {"active": True, "reason": "C accelerator built and enabled"}
    assert speedups.__name__ == "migrate.format._speedups"


@pytest.mark.parametrize("segment", [s for s in FIXTURE_SEGMENTS if s.stat().st_size], ids=fixture_id)
def test_walk_agrees_over_fixtures(segment):
    data = segment.read_bytes()
    raw, consumed, bad = speedups.walk(data)
    positions, ref_consumed = entries.walk_positions(data)
    assert bad == -1
    assert np.frombuffer(raw, np.int64).tolist() == positions.tolist()
    assert consumed == ref_consumed


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.one_of(st.integers(14, 60), st.integers(-(2**31), 13), st.just(2**31 - 1)), max_size=12))
def test_walk_agrees_on_any_declared_sizes(sizes):
    data = b"".join(struct.pack(">qi", 0, s) + bytes(max(0, min(s, 60))) for s in sizes)
    raw, consumed, bad = speedups.walk(data)
    try:
        positions, ref_consumed = entries.walk_positions(data)
    except CorruptRecordError as exc:
        assert bad == exc.position
        return
    assert (np.frombuffer(raw, np.int64).tolist(), consumed, bad) == (positions.tolist(), ref_consumed, -1)


def test_walk_past_its_first_allocation():
    """More entries than the first 1024-slot block of positions: the growth path."""
    entry = struct.pack(">qi", 0, 14) + bytes(14)
    raw, consumed, bad = speedups.walk(entry * 5000 + entry[:20])
    assert np.frombuffer(raw, np.int64).tolist() == list(range(0, 5000 * 26, 26))
    assert (consumed, bad) == (5000 * 26, -1)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(0, 3000), max_size=20), castagnoli=st.booleans())
def test_crc_ranges_agree(data, cuts, castagnoli):
    cuts = sorted(c % (len(data) + 1) for c in cuts)
    starts = np.array(cuts[0::2], np.int64)
    ends = np.array(cuts[1::2] + [len(data)] * (len(starts) - len(cuts[1::2])), np.int64)
    fast = speedups.crc_ranges(data, starts, ends, castagnoli)
    assert fast == checksums.crc_ranges(data, starts, ends, castagnoli)
    crc = checksums.crc32c if castagnoli else checksums.crc32
    assert np.frombuffer(fast, np.uint32).tolist() == [crc(data[s:e]) for s, e in zip(starts, ends)]


payload = st.one_of(st.none(), st.binary(max_size=200))
rows_with_types = st.lists(
    st.tuples(st.integers(0, 2**40), st.integers(-1, 2**50), payload, payload, st.sampled_from([0, 1])),
    min_size=1,
    max_size=30,
)


def _single_record_args(rows: list, epoch: int, flag: bool) -> tuple:
    cols = RecordColumns.from_records([Record(o, t, k, v) for o, t, k, v, _ in rows])
    types = np.array([r[4] for r in rows], np.int64)
    attributes = v2.new_record_attributes(cols, flag)
    arrays = (cols.offsets, cols.timestamps, types, cols.key_pos, cols.key_len, cols.value_pos, cols.value_len)
    return (cols.buffer, *arrays, attributes, epoch)


@settings(max_examples=60, deadline=None)
@given(rows=rows_with_types, epoch=st.integers(-(2**31), 2**31 - 1), flag=st.booleans())
def test_single_record_batches_agree(rows, epoch, flag):
    args = _single_record_args(rows, epoch, flag)
    fast, fast_sizes = speedups.single_record_batches(*args)
    slow, slow_sizes = v2.single_record_batches(*args)
    assert fast == slow
    assert fast_sizes == slow_sizes
    sizes = np.frombuffer(fast_sizes, np.int64)
    assert sizes.sum() == len(fast) and len(sizes) == len(rows)


PLAIN_LEGACY = [
    s
    for s in VALID_FIXTURE_SEGMENTS
    if any(isinstance(i, legacy.LegacyRun) for i in entries.read_entries(s.read_bytes()).items)
]


@pytest.mark.parametrize("segment", PLAIN_LEGACY, ids=fixture_id)
def test_single_record_batches_agree_over_fixture_columns(segment):
    """The conversion hot path on Kafka's bytes: the columns point into the segment buffer itself."""
    runs = [i for i in entries.read_entries(segment.read_bytes()).items if isinstance(i, legacy.LegacyRun)]
    for run in runs:
        cols = run.records
        args = (
            cols.buffer,
            *(int64_column(a) for a in (cols.offsets, cols.timestamps, np.maximum(run.timestamp_types(), 0))),
            *(int64_column(a) for a in (cols.key_pos, cols.key_len, cols.value_pos, cols.value_len)),
            v2.new_record_attributes(cols, True),
            7,
        )
        assert speedups.single_record_batches(*args) == v2.single_record_batches(*args)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2**40), st.integers(-1, 2**50), payload, payload), max_size=30))
def test_digest_stream_agrees(rows):
    cols = RecordColumns.from_records([Record(o, t, k, v) for o, t, k, v in rows])
    fast, slow = LogDigest(), LogDigest()
    fast.update(cols)
    slow._update_rows(cols)
    assert fast.hexdigests() == slow.hexdigests()
    assert fast.records == slow.records == len(rows)


@pytest.mark.parametrize(
    "segment", [s for s in FIXTURE_SEGMENTS if s.parent.name.startswith("already-v2")], ids=fixture_id
)
def test_columnar_v2_decoding_agrees_with_the_reader_or_declines(segment):
    data = segment.read_bytes()
    walk = entries.walk_entries(data)
    cols = v2.decode_uncompressed_batches(data, walk.positions, walk.sizes)
    assert cols is None  # these fixtures hold compressed batches and headers: the general reader must take them


@settings(max_examples=40, deadline=None)
@given(rows=rows_with_types)
def test_columnar_v2_decoding_of_single_record_batches(rows):
    offsets = sorted({r[0] for r in rows})
    records = [Record(o, t, k, v) for o, (_, t, k, v, _) in zip(offsets, rows)]
    types = np.array([r[4] for r in rows[: len(records)]], np.int64)
    data, _ = v2.encode_single_record_batches(RecordColumns.from_records(records), types, partition_leader_epoch=0)
    walk = entries.walk_entries(data)
    cols = v2.decode_uncompressed_batches(data, walk.positions, walk.sizes)
    reference = list(entries.read_entries(data).records())
    assert cols is not None
    assert cols.records.rows() == [r._replace(timestamp_type=0, batch_position=0) for r in reference]
    assert cols.last_offsets.tolist() == [r.offset for r in reference]


def _with_crc(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, v2.CRC_OFFSET, checksums.crc32c(bytes(raw[v2.ATTRIBUTES_OFFSET :])))
    return bytes(raw)


@pytest.mark.parametrize(
    ("what", "offset_deltas", "last_delta"),
    [
        ("decreasing", [1, 0], 1),
        ("repeated", [0, 0], 1),
        ("negative", [-1, 0], 1),
        ("past lastOffsetDelta", [0, 2], 1),
        ("negative lastOffsetDelta", [0, 1], -1),
    ],
)
def test_columnar_v2_decoding_declines_what_the_reader_refuses(what, offset_deltas, last_delta):
    """A CRC-valid batch whose record offsets break the reader's rules: the columnar decoder hands it to the reader
    (which raises) instead of returning offsets the reader would never produce."""
    parts = []
    for delta, (key, value) in zip(offset_deltas, [(b"a", b"1"), (b"b", b"2")]):
        parts.append(v2.encode_record(delta, 0, key, value, (), 0))
    body = b"".join(parts)
    raw = bytearray(v2.encode_batch([Record(100, 5, b"a", b"1"), Record(101, 5, b"b", b"2")]))
    raw[v2.RECORD_BATCH_OVERHEAD :] = body
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">i", raw, 23, last_delta)
    data = _with_crc(raw)
    walk = entries.walk_entries(data)
    assert v2.decode_uncompressed_batches(data, walk.positions, walk.sizes) is None
    with pytest.raises(CorruptRecordError):
        entries.read_entries(data)


def test_columnar_v2_decoding_declines_a_count_the_bytes_cannot_hold():
    raw = bytearray(v2.encode_batch([Record(100, 5, b"a", b"1")]))
    struct.pack_into(">i", raw, 57, 2**31 - 1)
    data = _with_crc(raw)
    walk = entries.walk_entries(data)
    assert v2.decode_uncompressed_batches(data, walk.positions, walk.sizes) is None


# --- the switch ------------------------------------------------------------------------------------------------

CONVERT = """
import dataclasses, hashlib, json, sys
import numpy as np
from migrate.format import accel, entries, legacy
from migrate.format import batch as v2
from migrate.format.digest import LogDigest
from migrate.format.records import TimestampType

out = hashlib.sha256()
digest = LogDigest()
for path in sys.argv[1:]:
    for item in entries.read_entries(open(path, "rb").read()).items:
        if isinstance(item, legacy.LegacyRun):
            types = np.maximum(item.timestamp_types(), TimestampType.CREATE_TIME)
            data, sizes = v2.encode_single_record_batches(item.records, types, tombstone_flag=True)
        else:
            data = v2.encode_batch(item.records, partition_leader_epoch=3)
        out.update(data)
        walk = entries.walk_entries(data)
        columns = v2.decode_uncompressed_batches(data, walk.positions, walk.sizes)
        for e in entries.read_entries(data).items if columns is None else []:
            digest.update(e.records)
        if columns is not None:
            digest.update(columns.records)
print(json.dumps({"status": dataclasses.asdict(accel.status()), "output": out.hexdigest(),
                  "digest": digest.hexdigests(), "records": digest.records}))
"""


def _convert(env_value: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != accel.ENV_VAR}
    if env_value is not None:
        env[accel.ENV_VAR] = env_value
    paths = [str(p) for p in VALID_FIXTURE_SEGMENTS if p.stat().st_size]
    proc = subprocess.run(
        [sys.executable, "-c", CONVERT, *paths], capture_output=True, text=True, env=env, cwd=REPO, check=True
    )
    return json.loads(proc.stdout)


def test_the_switch_turns_the_accelerator_off_and_changes_no_byte():
    """A small conversion of every fixture (single-record batches for plain legacy runs, one batch per other entry),
    its output read back column-wise and digested: once with the accelerator, once with
    KAFKA_LOG_MIGRATE_NO_EXTENSIONS=1 (every module on its Python reference)."""
    fast = _convert(None)
    slow = _convert("1")
    assert fast["status"] == {"active": True, "reason": "C accelerator built and enabled"}
    assert slow["status"] == {"active": False, "reason": f"disabled by {accel.ENV_VAR}=1"}
    assert fast["records"] > 1000
    assert {k: v for k, v in slow.items() if k != "status"} == {k: v for k, v in fast.items() if k != "status"}


def test_status_without_a_built_extension():
    """Where no compiler was present at install time the import fails: the status says so, the package works."""
    hide = (
        "import sys, importlib.abc\n"
        "class NotBuilt(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'migrate.format._speedups':\n"
        "            raise ModuleNotFoundError(name=name)\n"
        "sys.meta_path.insert(0, NotBuilt())\n"
        "from migrate.format import accel, entries\n"
        "assert accel.speedups is None and entries.walk_entries(bytes(16)).tail is not None\n"
        "print(accel.status())\n"
    )
    proc = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, cwd=REPO, check=True)
    assert proc.stdout.strip() == "Status(active=False, reason='not built (no C compiler at install time)')"


def test_the_switch_reads_zero_as_on():
    assert _convert("0")["status"]["active"] is True


def test_the_converted_output_is_what_the_reference_writes_in_process():
    """The same conversion in this process, by the Python references called directly: the subprocess hash is theirs."""
    out = hashlib.sha256()
    for path in VALID_FIXTURE_SEGMENTS:
        for item in entries.read_entries(path.read_bytes()).items:
            if isinstance(item, legacy.LegacyRun):
                cols = item.records
                types = np.maximum(item.timestamp_types(), TimestampType.CREATE_TIME)
                data, _ = v2.single_record_batches(
                    cols.buffer,
                    *(int64_column(a) for a in (cols.offsets, cols.timestamps, types, cols.key_pos, cols.key_len)),
                    *(int64_column(a) for a in (cols.value_pos, cols.value_len)),
                    v2.new_record_attributes(cols, True),
                    -1,
                )
            else:
                data = v2.encode_batch(item.records, partition_leader_epoch=3)
            out.update(data)
    assert out.hexdigest() == _convert(None)["output"]


@pytest.mark.parametrize("segment", [s for s in VALID_FIXTURE_SEGMENTS if s.stat().st_size], ids=fixture_id)
def test_legacy_runs_and_v2_batches_agree_with_the_references_over_fixtures(segment):
    """Every run of plain legacy messages decodes to the reference's columns; every run of plain v2 batches that
    the accelerator decodes is what the reader reads, header fields included."""
    data = segment.read_bytes()
    found = entries.read_entries(data)
    for item in found.items:
        if isinstance(item, legacy.LegacyRun):
            fast = legacy.decode_run(data, item.positions, item.sizes)
            ref = legacy.decode_run_reference(data, item.positions, item.sizes)
            for name in ("offsets", "timestamps", "key_pos", "key_len", "value_pos", "value_len"):
                assert getattr(fast.records, name).tolist() == getattr(ref.records, name).tolist(), name
            for name in ("magics", "attributes", "crcs"):
                assert getattr(fast, name).tolist() == getattr(ref, name).tolist(), name
    walk = entries.walk_entries(data)
    v2s = walk.magics == v2.MAGIC
    if v2s.any():
        cols = v2.decode_uncompressed_batches(data, walk.positions[v2s], walk.sizes[v2s])
        batches = [b for b in found.items if isinstance(b, v2.V2Batch)]
        if cols is not None:
            assert cols.last_offsets.tolist() == [b.last_offset for b in batches]
            assert cols.max_timestamps.tolist() == [b.max_timestamp for b in batches]
            assert cols.records.offsets.tolist() == [o for b in batches for o in b.records.offsets.tolist()]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9000), max_size=60),
    interval=st.sampled_from([0, 1, 100, 4096, 10**9, -1]),
    start=st.integers(0, 10_000),
    data=st.data(),
)
def test_index_entries_agree_with_the_reference(sizes, interval, start, data):
    from migrate.segment.indexes import index_entries

    n = len(sizes)
    lasts = np.cumsum(np.array(data.draw(st.lists(st.integers(1, 5), min_size=n, max_size=n)), np.int64))
    maxes = np.array(data.draw(st.lists(st.integers(-1, 40), min_size=n, max_size=n)), np.int64)
    last_entry = data.draw(st.integers(0, start))
    state = (start, last_entry, data.draw(st.integers(-1, 30)), 3, data.draw(st.integers(-1, 30)))
    args = (np.array(sizes, np.int64), lasts, maxes, interval, *state)
    assert speedups.index_entries(*args) == index_entries(*args)
