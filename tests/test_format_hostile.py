"""The C accelerator driven directly with hostile arguments: a Python exception, or the right answer where the input
is valid after all, never a crash or a read outside a buffer.

Every function of migrate.format._speedups takes its positions and lengths from untrusted files. Here each one gets
positions past the end, negative positions and lengths, lengths running past the end, ends before starts, int64
extremes, arrays of the wrong dtype, shape, layout or alignment, parallel arrays of different lengths, empty arrays,
empty buffers, and batch headers claiming more records than the batch can hold. A crash kills the pytest run, which
is the point: it must never happen. The fuzz tests at the end feed random arguments to every function, checked
against the Python references by the engine of benchmarks/fuzz_speedups.py.
"""

from __future__ import annotations

import importlib.util
import struct
import sys
import threading
import time
import tracemalloc
from collections import Counter

import numpy as np
import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migrate.format import accel, checksums
from migrate.format import batch as v2
from migrate.format.digest import LogDigest
from migrate.format.entries import read_entries
from migrate.format.records import Record, RecordColumns

speedups = accel.speedups
pytestmark = pytest.mark.skipif(speedups is None, reason=f"C accelerator not in use: {accel.status().reason}")

REFUSED = (TypeError, ValueError, OverflowError, MemoryError, BufferError)
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


def _load_engine():
    spec = importlib.util.spec_from_file_location("fuzz_speedups", REPO / "benchmarks" / "fuzz_speedups.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_speedups"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fuzz = _load_engine()


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def misaligned(a: np.ndarray) -> np.ndarray:
    raw = bytearray(a.nbytes + 1)
    out = np.frombuffer(raw, a.dtype, count=len(a), offset=1)
    out[:] = a
    return out


def wrong_arrays(a: np.ndarray) -> list[tuple[str, object]]:
    """``a`` as everything an int64 column must not be."""
    return [
        ("int32", a.astype(np.int32)),
        ("uint64", a.astype(np.uint64)),
        ("float64", a.astype(np.float64)),
        ("object", a.astype(object)),
        ("bool", a.astype(bool)),
        ("big-endian", a.astype(">i8")),
        ("strided", np.repeat(a, 2)[::2]),
        ("2-D", np.stack([a, a])),
        ("0-D", np.array(a[0] if len(a) else 0, np.int64)),
        ("bytes", a.tobytes()),
        ("list", a.tolist()),
        ("None", None),
    ]


# --- walk --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("empty", [b"", bytearray(), memoryview(b""), np.zeros(0, np.uint8)])
def test_walk_of_nothing(empty):
    assert speedups.walk(empty) == (b"", 0, -1)


@pytest.mark.parametrize("buf", ["text", None, 17, [1, 2], memoryview(bytes(40))[::2]])
def test_walk_refuses_what_is_not_contiguous_bytes(buf):
    with pytest.raises((TypeError, BufferError)):
        speedups.walk(buf)


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (2**31 - 1, (b"", 0, -1)),  # an entry running past the end: the walk stops, consumed 0
        (-(2**31), (b"", 0, 0)),  # below the minimum: bad at 0
        (-1, (b"", 0, 0)),
        (13, (b"", 0, 0)),
        (14, (i64(0).tobytes(), 26, -1)),
    ],
)
def test_walk_with_extreme_declared_sizes(size, expected):
    assert speedups.walk(struct.pack(">qi", 0, size) + bytes(14)) == expected


@pytest.mark.parametrize("length", [0, 1, 12, 16])
def test_walk_of_less_than_an_entry_header(length):
    assert speedups.walk(b"\xff" * length) == (b"", 0, -1)


# --- crc_ranges ------------------------------------------------------------------------------------------------

DATA = bytes(range(256)) * 2


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (-1, 10),  # negative start
        (0, len(DATA) + 1),  # end past the buffer
        (len(DATA) + 1, len(DATA) + 1),  # both past it
        (10, 9),  # end before start
        (0, -1),
        (I64_MIN, 0),
        (I64_MAX, I64_MAX),
        (0, I64_MAX),
        (I64_MIN, I64_MAX),
        (I64_MAX - 5, I64_MIN),
    ],
)
@pytest.mark.parametrize("castagnoli", [False, True])
def test_crc_ranges_refuse_ranges_outside_the_buffer(start, end, castagnoli):
    starts, ends = i64(0, start), i64(5, end)
    with pytest.raises(ValueError, match=r"range 1 .* is not inside"):
        speedups.crc_ranges(DATA, starts, ends, castagnoli)
    with pytest.raises(ValueError, match=r"range 1 .* is not inside"):
        checksums.crc_ranges(DATA, starts, ends, castagnoli)  # the reference refuses the same


@pytest.mark.parametrize("castagnoli", [False, True])
def test_crc_ranges_at_the_edges_of_the_buffer(castagnoli):
    n = len(DATA)
    starts, ends = i64(0, n, 0, n - 1), i64(n, n, 0, n)
    crc = checksums.crc32c if castagnoli else checksums.crc32
    got = np.frombuffer(speedups.crc_ranges(DATA, starts, ends, castagnoli), np.uint32).tolist()
    assert got == [crc(DATA), 0, 0, crc(DATA[-1:])]
    assert speedups.crc_ranges(b"", i64(0), i64(0), castagnoli) == b"\x00\x00\x00\x00"  # empty range of no bytes
    assert speedups.crc_ranges(b"", i64(), i64(), castagnoli) == b""
    with pytest.raises(ValueError):
        speedups.crc_ranges(b"", i64(0), i64(1), castagnoli)


@pytest.mark.parametrize("which", [0, 1])
def test_crc_ranges_refuse_wrong_arrays(which):
    good = i64(0, 4)
    for label, bad in wrong_arrays(good):
        args = [DATA, good, good, True]
        args[1 + which] = bad
        with pytest.raises(TypeError, match="starts" if which == 0 else "ends"):
            speedups.crc_ranges(*args)
        assert label  # (named for the failure message)
    args = [DATA, good, good, True]
    args[1 + which] = misaligned(good)
    with pytest.raises(ValueError, match="aligned"):
        speedups.crc_ranges(*args)


@pytest.mark.parametrize(("n_starts", "n_ends"), [(3, 2), (2, 3), (0, 1), (1, 0)])
def test_crc_ranges_refuse_arrays_of_different_lengths(n_starts, n_ends):
    with pytest.raises(ValueError, match="items"):
        speedups.crc_ranges(DATA, np.zeros(n_starts, np.int64), np.zeros(n_ends, np.int64), False)


def test_crc_ranges_refuse_a_strided_buffer():
    with pytest.raises((TypeError, BufferError)):
        speedups.crc_ranges(memoryview(DATA)[::2], i64(0), i64(1), False)


# --- single_record_batches ---------------------------------------------------------------------------------------

SRB_BUF = b"key-one" + b"value-one" + b"k2"
SRB = {
    "offsets": i64(5, 6, 7),
    "timestamps": i64(-1, 0, I64_MAX),
    "timestamp_types": i64(0, 1, 0),
    "key_pos": i64(0, 0, 16),
    "key_len": i64(7, -1, 2),
    "value_pos": i64(7, 0, 0),
    "value_len": i64(9, 0, -1),
    "record_attributes": np.array([0, 0, 0x20], np.uint8),
}


def srb(buf: object = SRB_BUF, epoch: object = -1, **columns: object) -> tuple:
    return (buf, *[columns.get(k, v) for k, v in SRB.items()], epoch)


def both_srb(*args: object) -> tuple[bytes, bytes]:
    """The accelerator's result, checked equal to the reference's."""
    got = speedups.single_record_batches(*args)
    assert got == v2.single_record_batches(*args)
    return got


def test_single_record_batches_baseline_is_valid():
    raw, sizes = both_srb(*srb())
    records = [(r.offset, r.timestamp, r.key, r.value) for r in read_entries(raw).records()]
    assert records == [(5, -1, b"key-one", b"value-one"), (6, 0, None, b""), (7, I64_MAX, b"k2", None)]
    assert np.frombuffer(sizes, np.int64).sum() == len(raw)


@pytest.mark.parametrize(
    ("column", "values"),
    [
        ("key_pos", i64(0, 0, 17)),  # runs one byte past the end
        ("key_pos", i64(-1, 0, 16)),  # negative position
        ("key_pos", i64(I64_MAX, 0, 16)),  # position + length overflows int64
        ("key_pos", i64(I64_MIN, 0, 16)),
        ("key_len", i64(7, -2, 2)),  # only -1 is null
        ("key_len", i64(7, I64_MIN, 2)),
        ("key_len", i64(I64_MAX, -1, 2)),
        ("key_len", i64(len(SRB_BUF) + 1, -1, 2)),
        ("value_pos", i64(10, 0, 0)),  # 10 + 9 > 18
        ("value_pos", i64(len(SRB_BUF) + 1, 0, 0)),
        ("value_len", i64(9, -5, -1)),
        ("value_len", i64(9, 0, I64_MAX)),
        ("value_len", i64(2**31, 0, -1)),
    ],
)
def test_single_record_batches_refuse_pieces_outside_the_buffer(column, values):
    args = srb(**{column: values})
    with pytest.raises(ValueError, match="not inside"):
        speedups.single_record_batches(*args)
    with pytest.raises(ValueError, match="not inside"):
        v2.single_record_batches(*args)


def test_single_record_batches_take_pieces_at_the_very_end_and_ignore_positions_of_null_ones():
    n = len(SRB_BUF)
    raw, _ = both_srb(*srb(key_pos=i64(n - 18, I64_MIN, n), key_len=i64(0, -1, 0), value_pos=i64(n - 9, n, 0)))
    assert [(r.key, r.value) for r in read_entries(raw).records()] == [(b"", SRB_BUF[-9:]), (None, b""), (b"", None)]
    zeros = i64(0, 0, 0)
    raw, _ = both_srb(*srb(buf=b"", key_pos=zeros, key_len=i64(-1, -1, 0), value_pos=zeros, value_len=i64(0, -1, -1)))
    assert [(r.key, r.value) for r in read_entries(raw).records()] == [(None, b""), (None, None), (b"", None)]
    for empty_at in (-1, n + 1, I64_MAX):  # an empty piece still has a place, inside the buffer
        with pytest.raises(ValueError, match="not inside"):
            speedups.single_record_batches(*srb(key_pos=i64(0, 0, empty_at), key_len=i64(7, -1, 0)))
        with pytest.raises(ValueError, match="not inside"):
            v2.single_record_batches(*srb(key_pos=i64(0, 0, empty_at), key_len=i64(7, -1, 0)))


@pytest.mark.parametrize("column", list(SRB))
def test_single_record_batches_refuse_wrong_arrays(column):
    good = SRB[column]
    for label, bad in wrong_arrays(good.astype(np.int64)):
        if column == "record_attributes" and label == "bytes":  # a bytes object is a fine uint8 column
            continue
        with pytest.raises(TypeError, match=column):
            speedups.single_record_batches(*srb(**{column: bad}))
    if column == "record_attributes":
        with pytest.raises(TypeError, match=column):
            speedups.single_record_batches(*srb(**{column: good.astype(np.int64)}))
    else:
        with pytest.raises(ValueError, match="aligned"):
            speedups.single_record_batches(*srb(**{column: misaligned(good)}))


@pytest.mark.parametrize("column", list(SRB))
@pytest.mark.parametrize("length", [0, 2, 4])
def test_single_record_batches_refuse_arrays_of_different_lengths(column, length):
    values = np.resize(SRB[column], length).astype(SRB[column].dtype)
    with pytest.raises(ValueError, match="items"):
        speedups.single_record_batches(*srb(**{column: values}))
    with pytest.raises(ValueError, match="items"):
        v2.single_record_batches(*srb(**{column: values}))


@pytest.mark.parametrize("epoch", [2**31, -(2**31) - 1, I64_MAX, 2**64])
def test_single_record_batches_refuse_an_epoch_beyond_int32(epoch):
    with pytest.raises(OverflowError):
        speedups.single_record_batches(*srb(epoch=epoch))
    with pytest.raises(OverflowError):
        v2.single_record_batches(*srb(epoch=epoch))


@pytest.mark.parametrize("epoch", ["7", 7.0, None])
def test_single_record_batches_refuse_an_epoch_that_is_not_an_int(epoch):
    with pytest.raises(TypeError):
        speedups.single_record_batches(*srb(epoch=epoch))


def test_single_record_batches_of_no_records():
    empty = {k: v[:0] for k, v in SRB.items()}
    assert both_srb(*srb(buf=b"", **empty)) == (b"", b"")


def test_single_record_batches_with_extreme_offsets_timestamps_and_types():
    raw, _ = both_srb(
        *srb(
            offsets=i64(I64_MIN, -1, I64_MAX), timestamps=i64(I64_MIN, I64_MAX, -2), timestamp_types=i64(-1, I64_MAX, 1)
        )
    )
    assert struct.unpack_from(">q", raw, 0)[0] == I64_MIN


# --- digest_stream -----------------------------------------------------------------------------------------------

DIG = {
    "offsets": i64(1, 2, 3),
    "timestamps": i64(-1, 0, I64_MIN),
    "key_pos": i64(0, 99, 16),
    "key_len": i64(7, -1, 2),
    "value_pos": i64(7, I64_MAX, 0),
    "value_len": i64(9, I64_MIN, 0),  # any negative length is null here
}


def dig(buf: object = SRB_BUF, with_ts: bool = True, **columns: object) -> tuple:
    return (buf, *[columns.get(k, v) for k, v in DIG.items()], with_ts)


def reference_digest(buf: object, columns: dict, with_ts: bool) -> str:
    d = LogDigest(plain=not with_ts, timed=with_ts)
    d._update_rows(RecordColumns(buf, *columns.values()))
    return d.hexdigests()[1 if with_ts else 0]


@pytest.mark.parametrize("with_ts", [False, True])
def test_digest_stream_treats_every_negative_length_as_null(with_ts):
    import hashlib

    got = speedups.digest_stream(*dig(with_ts=with_ts))
    assert hashlib.sha256(got).hexdigest() == reference_digest(SRB_BUF, DIG, with_ts)
    assert got.count(b"\x01") >= 2


@pytest.mark.parametrize(
    ("column", "values"),
    [
        ("key_pos", i64(0, 0, 17)),
        ("key_pos", i64(-1, 0, 16)),
        ("key_pos", i64(I64_MAX, 0, 16)),
        ("key_len", i64(I64_MAX, -1, 2)),
        ("key_len", i64(19, -1, 2)),
        ("value_pos", i64(10, 0, 0)),
        ("value_pos", i64(I64_MIN, 0, 0)),
        ("value_len", i64(12, -1, 0)),
    ],
)
def test_digest_stream_refuses_pieces_outside_the_buffer(column, values):
    with pytest.raises(ValueError, match="not inside"):
        speedups.digest_stream(*dig(**{column: values}))
    with pytest.raises(ValueError, match="not inside"):
        reference_digest(SRB_BUF, {**DIG, column: values}, True)


@pytest.mark.parametrize("column", list(DIG))
def test_digest_stream_refuses_wrong_arrays(column):
    for _, bad in wrong_arrays(DIG[column]):
        with pytest.raises(TypeError, match=column):
            speedups.digest_stream(*dig(**{column: bad}))
    with pytest.raises(ValueError, match="aligned"):
        speedups.digest_stream(*dig(**{column: misaligned(DIG[column])}))
    with pytest.raises(ValueError, match="items"):
        speedups.digest_stream(*dig(**{column: DIG[column][:2]}))


def test_digest_stream_of_nothing():
    assert speedups.digest_stream(b"", *[v[:0] for v in DIG.values()], True) == b""
    nulls = speedups.digest_stream(b"", i64(4), i64(5), i64(0), i64(-1), i64(0), i64(0), False)
    assert nulls == struct.pack(">q", 4) + b"\x01" + b"\x00" + struct.pack(">i", 0) + struct.pack(">i", 0)


# --- v2_records --------------------------------------------------------------------------------------------------


def v2_segment() -> tuple[bytes, np.ndarray, np.ndarray]:
    batches = [
        v2.encode_batch([Record(10, 5, b"a", b"1"), Record(12, 6, None, b"22")]),
        v2.encode_batch([Record(13, -1, b"bb", None)]),
    ]
    sizes = i64(*(len(b) for b in batches))
    return b"".join(batches), np.cumsum(sizes) - sizes, sizes


def test_v2_records_baseline():
    data, positions, sizes = v2_segment()
    status, counts, offsets, timestamps, *_ = speedups.v2_records(data, positions, sizes)
    assert list(status) == [0, 0] and np.frombuffer(counts, np.int64).tolist() == [2, 1]
    assert np.frombuffer(offsets, np.int64).tolist() == [10, 12, 13]
    assert np.frombuffer(timestamps, np.int64).tolist() == [5, 6, -1]


@pytest.mark.parametrize(
    ("position", "size"),
    [
        (-1, 70),
        (0, -1),
        (I64_MIN, 70),
        (I64_MAX, 70),
        (70, I64_MAX),
        (I64_MAX, I64_MAX),
        ("end", 1),  # starts at the end, one byte past it
        ("end+1", 0),
        (0, "end+1"),
    ],
)
def test_v2_records_refuse_batches_outside_the_buffer(position, size):
    data, positions, sizes = v2_segment()
    n = len(data)
    resolve = {"end": n, "end+1": n + 1}
    p = positions.copy()
    s = sizes.copy()
    p[1] = resolve.get(position, position)
    s[1] = resolve.get(size, size)
    with pytest.raises(ValueError, match="not inside"):
        speedups.v2_records(data, p, s)


@pytest.mark.parametrize("size", [0, 1, 60])
def test_v2_records_call_a_batch_smaller_than_its_header_malformed(size):
    data, positions, sizes = v2_segment()
    s = sizes.copy()
    s[1] = size
    status, _, offsets, *_ = speedups.v2_records(data, positions, s)
    assert list(status) == [0, 2]
    assert np.frombuffer(offsets, np.int64).tolist() == [10, 12]
    assert speedups.v2_records(b"", i64(0), i64(0))[0] == b"\x02"


@pytest.mark.parametrize("count", [2, 3, 8, 1000, 2**31 - 1])
def test_v2_records_never_trust_a_count_the_bytes_cannot_hold(count):
    """A batch whose header claims more records than it holds: malformed, and nothing allocated for the claim
    (2^31 - 1 records used to mean 6 columns of 16 GiB each)."""
    data, positions, sizes = v2_segment()
    raw = bytearray(data)
    struct.pack_into(">i", raw, int(positions[1]) + 57, count)
    tracemalloc.start()
    try:
        status, _, offsets, *_ = speedups.v2_records(bytes(raw), positions, sizes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert list(status) == [0, 2] and np.frombuffer(offsets, np.int64).tolist() == [10, 12]
    assert peak < 1 << 20


@pytest.mark.parametrize("count", [-1, -(2**31)])
def test_v2_records_defer_a_negative_count_to_the_reader(count):
    data, positions, sizes = v2_segment()
    raw = bytearray(data)
    struct.pack_into(">i", raw, 57, count)
    assert speedups.v2_records(bytes(raw), positions, sizes)[0] == b"\x01\x00"


@pytest.mark.parametrize(
    ("at", "patch", "status"),
    [
        (61, b"\x7f", 2),  # the first record's length varint says 63 bytes: past the batch
        (61, b"\x0a", 2),  # record length 5: below the minimum of 6
        (61, b"\xff\xff\xff\xff\xff", 2),  # an unterminated length varint
        (22, b"\x01", 1),  # compressed (gzip): the reader's
        (22, b"\x07", 1),  # an unknown codec: the reader's (it raises)
        (0, struct.pack(">q", I64_MAX - 1), 2),  # base offset + the second record's delta of 2 overflows int64
        (23, struct.pack(">i", 1), 2),  # lastOffsetDelta 1, below the second record's delta of 2
        (23, struct.pack(">i", -1), 2),
    ],
)
def test_v2_records_on_damaged_batches(at, patch, status):
    data, positions, sizes = v2_segment()
    raw = bytearray(data)
    raw[at : at + len(patch)] = patch
    got = speedups.v2_records(bytes(raw), positions, sizes)
    assert list(got[0]) == [status, 0]
    assert np.frombuffer(got[2], np.int64).tolist() == [13]  # only the second batch's record


def test_v2_records_refuse_wrong_arrays():
    data, positions, sizes = v2_segment()
    for which in (0, 1):
        good = (positions, sizes)[which]
        for _, bad in wrong_arrays(good):
            args = [data, positions, sizes]
            args[1 + which] = bad
            with pytest.raises(TypeError, match=("positions", "sizes")[which]):
                speedups.v2_records(*args)
        args = [data, positions, sizes]
        args[1 + which] = misaligned(good)
        with pytest.raises(ValueError, match="aligned"):
            speedups.v2_records(*args)
    with pytest.raises(ValueError, match="items"):
        speedups.v2_records(data, positions, sizes[:1])


def test_v2_records_of_nothing():
    assert speedups.v2_records(b"", i64(), i64()) == (b"", b"", b"", b"", b"", b"", b"", b"")


# --- v2_batches -------------------------------------------------------------------------------------------------


def test_v2_batches_baseline_and_header_fields():
    data, positions, sizes = v2_segment()
    status, counts, lasts, maxes, offsets, *_ = speedups.v2_batches(data, positions, sizes)
    assert list(status) == [0, 0] and np.frombuffer(counts, np.int64).tolist() == [2, 1]
    assert np.frombuffer(lasts, np.int64).tolist() == [12, 13]
    assert np.frombuffer(maxes, np.int64).tolist() == [6, -1]
    assert np.frombuffer(offsets, np.int64).tolist() == [10, 12, 13]


def test_v2_batches_call_a_bad_checksum_malformed_where_v2_records_does_not_look():
    data, positions, sizes = v2_segment()
    raw = bytearray(data)
    raw[int(positions[1]) + 17] ^= 0x01  # the stored CRC-32C of the second batch
    assert list(speedups.v2_records(bytes(raw), positions, sizes)[0]) == [0, 0]
    assert list(speedups.v2_batches(bytes(raw), positions, sizes)[0]) == [0, 2]


@pytest.mark.parametrize(("position", "size"), [(-1, 70), (0, -1), (I64_MAX, 70), (70, I64_MAX), ("end", 1)])
def test_v2_batches_refuse_batches_outside_the_buffer(position, size):
    data, positions, sizes = v2_segment()
    p, s = positions.copy(), sizes.copy()
    p[1] = len(data) if position == "end" else position
    s[1] = size
    with pytest.raises(ValueError, match="not inside"):
        speedups.v2_batches(data, p, s)


def test_v2_batches_shorter_than_a_header_have_no_header_fields():
    data, positions, sizes = v2_segment()
    status, _, lasts, maxes, *_ = speedups.v2_batches(data, positions, i64(60, int(sizes[1])))
    assert status[0] == 2 and np.frombuffer(lasts, np.int64)[0] == 0 == np.frombuffer(maxes, np.int64)[0]


# --- legacy_run -------------------------------------------------------------------------------------------------


def legacy_segment() -> tuple[bytes, np.ndarray, np.ndarray]:
    from migrate.format import legacy

    messages = [
        legacy.encode_messages([Record(7, -1, b"k", b"v")], 0),
        legacy.encode_messages([Record(8, 1500000000000, None, b"")], 1),
        legacy.encode_messages([Record(9, 5, b"", None)], 1),
    ]
    sizes = i64(*(len(m) for m in messages))
    return b"".join(messages), np.cumsum(sizes) - sizes, sizes


def test_legacy_run_baseline():
    data, positions, sizes = legacy_segment()
    status, offsets, _, timestamps, key_pos, key_len, value_pos, value_len, magics, _ = speedups.legacy_run(
        data, positions, sizes
    )
    assert list(status) == [0, 0, 0]
    assert np.frombuffer(offsets, np.int64).tolist() == [7, 8, 9]
    assert np.frombuffer(timestamps, np.int64).tolist() == [-1, 1500000000000, 5]
    assert np.frombuffer(key_len, np.int64).tolist() == [1, -1, 0]
    assert np.frombuffer(value_len, np.int64).tolist() == [1, 0, -1]
    assert np.frombuffer(magics, np.int64).tolist() == [0, 1, 1]
    k, v = np.frombuffer(key_pos, np.int64)[0], np.frombuffer(value_pos, np.int64)[0]
    assert (data[k : k + 1], data[v : v + 1]) == (b"k", b"v")


@pytest.mark.parametrize(
    ("what", "at", "value"),
    [
        ("crc", 12, 0x00),  # a stored CRC byte
        ("magic", 16, 2),
        ("compressed", 17, 1),
        ("key length past the end", 18, 0x7F),
        ("key length below -1", 18, 0xFF),  # -2 .. once the other bytes say so
        ("value byte", -1, 0x55),
    ],
)
def test_legacy_run_marks_a_bad_message_and_leaves_the_others(what, at, value):
    data, positions, sizes = legacy_segment()
    raw = bytearray(data)
    where = int(positions[0]) + (at if at >= 0 else int(sizes[0]) + at)
    raw[where] = value if raw[where] != value else value ^ 1
    status = speedups.legacy_run(bytes(raw), positions, sizes)[0]
    assert list(status) == [1, 0, 0], what


@pytest.mark.parametrize("size", [0, 1, 17, 25, 33])
def test_legacy_run_marks_messages_shorter_than_their_fixed_fields(size):
    data, positions, sizes = legacy_segment()
    s = sizes.copy()
    s[1] = size  # a magic 1 message needs 34 bytes, a magic 0 one 26
    assert list(speedups.legacy_run(data, positions, s)[0])[1] == 1


@pytest.mark.parametrize(("position", "size"), [(-1, 30), (0, -1), (I64_MAX, 30), (30, I64_MAX), (I64_MIN, 0)])
def test_legacy_run_refuses_messages_outside_the_buffer(position, size):
    data, positions, sizes = legacy_segment()
    p, s = positions.copy(), sizes.copy()
    p[2], s[2] = position, size
    with pytest.raises(ValueError, match="not inside"):
        speedups.legacy_run(data, p, s)


def test_legacy_run_refuses_wrong_arrays():
    data, positions, sizes = legacy_segment()
    for _, bad in wrong_arrays(positions):
        with pytest.raises(REFUSED):
            speedups.legacy_run(data, bad, sizes)
        with pytest.raises(REFUSED):
            speedups.legacy_run(data, positions, bad)
    with pytest.raises(ValueError, match="items"):
        speedups.legacy_run(data, positions, sizes[:2])


def test_legacy_run_of_nothing():
    status, *cols = speedups.legacy_run(b"", i64(), i64())
    assert status == b"" and all(c == b"" for c in cols)


# --- index_entries ----------------------------------------------------------------------------------------------

STATE = (0, 0, -1, -1, -1)


def test_index_entries_baseline():
    offsets, times, *state = speedups.index_entries(i64(100, 100, 100), i64(5, 6, 7), i64(10, 30, 20), 150, *STATE)
    assert np.frombuffer(offsets, np.int64).tolist() == [7, 200]  # the batch at 200 is the first past 150 bytes
    assert np.frombuffer(times, np.int64).tolist() == [30, 6]
    assert state == [300, 200, 30, 6, 30]


@pytest.mark.parametrize(
    "state",
    [(-1, 0, -1, -1, -1), (10, 11, -1, -1, -1), (10, -1, -1, -1, -1), (I64_MIN, I64_MIN, -1, -1, -1)],
)
def test_index_entries_refuse_a_state_whose_last_entry_is_not_within_the_valid_bytes(state):
    with pytest.raises(ValueError, match="index state"):
        speedups.index_entries(i64(1), i64(1), i64(1), 10, *state)


def test_index_entries_refuse_negative_sizes_and_positions_beyond_int64():
    with pytest.raises(ValueError, match="negative size"):
        speedups.index_entries(i64(5, -1), i64(1, 2), i64(1, 2), 10, *STATE)
    with pytest.raises(OverflowError, match="beyond an int64"):
        speedups.index_entries(i64(I64_MAX, 1), i64(1, 2), i64(1, 2), 10, *STATE)
    with pytest.raises(OverflowError, match="beyond an int64"):
        speedups.index_entries(i64(2), i64(1), i64(1), 10, I64_MAX - 1, 0, -1, -1, -1)
    with pytest.raises(OverflowError):
        speedups.index_entries(i64(2), i64(1), i64(1), 2**63, *STATE)


def test_index_entries_with_extreme_intervals_and_no_batches():
    sizes, lasts, maxes = i64(10, 10, 10), i64(1, 2, 3), i64(5, 5, 5)
    every, _, *_ = speedups.index_entries(sizes, lasts, maxes, -1, *STATE)
    assert np.frombuffer(every, np.int64).tolist() == [1, 0, 2, 10, 3, 20]
    never, times, *state = speedups.index_entries(sizes, lasts, maxes, I64_MAX, *STATE)
    assert never == b"" == times and state == [30, 0, 5, 1, -1]
    assert speedups.index_entries(i64(), i64(), i64(), 4096, *STATE) == (b"", b"", *STATE)


def test_index_entries_refuse_wrong_arrays():
    for _, bad in wrong_arrays(i64(1, 2)):
        with pytest.raises(REFUSED):
            speedups.index_entries(bad, i64(1, 2), i64(1, 2), 10, *STATE)
    with pytest.raises(ValueError, match="items"):
        speedups.index_entries(i64(1, 2), i64(1), i64(1, 2), 10, *STATE)


# --- fuzzing: random arguments to every function, checked against the references ----------------------------------

SEED = 20240917
CASES = 5000  # about 500 per function


def test_seeded_random_calls_agree_with_the_references():
    """The engine of benchmarks/fuzz_speedups.py, a few thousand seeded cases over every function."""
    report = fuzz.fuzz(speedups, CASES, SEED)
    assert report.mismatches == [], report.mismatches[:3]
    by_function = Counter()
    for key, n in report.outcomes.items():
        by_function[key.split(":")[0], "ok" if ": ok" in key else "refused"] += n
    for name in fuzz.FUNCTIONS:
        # both accepted and refused (or declined) calls, for every function
        assert by_function[name, "ok"] > (40 if name.startswith("small_") else 100), by_function
        if name != "walk":
            assert by_function[name, "refused"] > 50, by_function
    assert report.outcomes["v2_records: ok decoded"] > 100
    assert report.outcomes["v2_batches: ok decoded"] > 40
    assert report.outcomes["legacy_run: ok read"] > 100
    assert report.outcomes["index_entries: ok indexed"] > 40
    assert report.outcomes["small_legacy_v2: ok converted"] > 40
    assert report.outcomes["small_v2_records: ok read"] > 40


int64s = st.one_of(
    st.integers(-3, 600),
    st.sampled_from([I64_MIN, I64_MIN + 1, -(2**31), 2**31 - 1, 2**31, I64_MAX]),
    st.integers(I64_MIN, I64_MAX),
)
dtypes = st.sampled_from([np.int64] * 8 + [np.int32, np.float64, np.uint64, object, np.uint8])


@st.composite
def columns(draw: st.DrawFn, count: int, n: int | None = None, dtype: type | None = None) -> list:
    """``count`` arrays of mostly one length ``n``, mostly int64, now and then strided, 2-D or misaligned."""
    n = draw(st.integers(0, 12)) if n is None else n
    out = []
    for _ in range(count):
        length = n if draw(st.integers(0, 9)) else draw(st.integers(0, 13))
        values = draw(st.lists(int64s, min_size=length, max_size=length))
        kind = dtype or draw(dtypes)
        if kind is np.int64:
            a = np.array(values, np.int64)
        elif kind is object:
            a = np.array(values, object)
        else:
            a = np.array([v % 256 for v in values], np.int64).astype(kind)
        layout = draw(st.sampled_from(["plain"] * 12 + ["strided", "2-D", "misaligned"]))
        if layout == "strided":
            a = np.repeat(a, 2)[::2]
        elif layout == "2-D":
            a = a.reshape(1, -1)
        elif layout == "misaligned" and a.dtype != object and len(a):
            a = misaligned(a)
        out.append(a)
    return out


buffers = st.one_of(st.binary(max_size=300), st.sampled_from([b"", v2_segment()[0]]))
HYPOTHESIS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYPOTHESIS
@given(buf=st.one_of(buffers, st.binary(max_size=64).map(lambda b: memoryview(b)[::2])))
def test_fuzz_walk(buf):
    fuzz.check_walk(speedups, buf)


@HYPOTHESIS
@given(buf=buffers, cols=columns(2), castagnoli=st.booleans())
def test_fuzz_crc_ranges(buf, cols, castagnoli):
    fuzz.check_crc_ranges(speedups, buf, *cols, castagnoli)


@HYPOTHESIS
@given(
    buf=buffers,
    cols=columns(7),
    attributes=columns(1, dtype=np.uint8),
    epoch=st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([2**31, -(2**31) - 1])),
)
def test_fuzz_single_record_batches(buf, cols, attributes, epoch):
    fuzz.check_single_record_batches(speedups, buf, cols, attributes[0], epoch)


@HYPOTHESIS
@given(buf=buffers, cols=columns(6), with_ts=st.booleans())
def test_fuzz_digest_stream(buf, cols, with_ts):
    fuzz.check_digest_stream(speedups, buf, cols, with_ts)


@HYPOTHESIS
@given(data=st.data(), damage=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4))
def test_fuzz_v2_records(data, damage):
    seg, positions, sizes = v2_segment()
    raw = bytearray(seg)
    for at, value in damage:
        raw[at % len(raw)] = value
    if data.draw(st.booleans()):
        positions, sizes = data.draw(columns(2))
    fuzz.check_v2_records(speedups, bytes(raw), positions, sizes)


@HYPOTHESIS
@given(data=st.data(), damage=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4))
def test_fuzz_v2_batches(data, damage):
    seg, positions, sizes = v2_segment()
    raw = bytearray(seg)
    for at, value in damage:
        raw[at % len(raw)] = value
    if data.draw(st.booleans()):
        positions, sizes = data.draw(columns(2))
    fuzz.check_v2_batches(speedups, bytes(raw), positions, sizes)


@HYPOTHESIS
@given(data=st.data(), damage=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4))
def test_fuzz_legacy_run(data, damage):
    seg, positions, sizes = legacy_segment()
    raw = bytearray(seg)
    for at, value in damage:
        raw[at % len(raw)] = value
    if data.draw(st.booleans()):
        positions, sizes = data.draw(columns(2))
    fuzz.check_legacy_run(speedups, bytes(raw), positions, sizes)


@HYPOTHESIS
@given(
    cols=columns(3),
    interval=st.one_of(st.integers(-5, 5000), st.sampled_from([I64_MIN, I64_MAX])),
    state=st.lists(int64s, min_size=5, max_size=5),
)
def test_fuzz_index_entries(cols, interval, state):
    fuzz.check_index_entries(speedups, cols, interval, state)


# --- the loops run without the GIL ------------------------------------------------------------------------------


def long_calls(n: int = 20_000) -> dict[str, tuple]:
    """Per function: its arguments over ``n`` valid items (about 2-5 MB), for calls long enough to be caught in."""
    batch = v2.encode_batch([Record(0, 5, b"key", b"v" * 100)])
    message = legacy_segment()[0][: int(legacy_segment()[2][0])]
    one = np.ones(n, np.int64)
    piece_pos, piece_len = np.zeros(n, np.int64), one * len(SRB_BUF)
    return {
        "crc_ranges": (DATA * 8000, np.arange(n, dtype=np.int64) * 100, np.arange(n, dtype=np.int64) * 100 + 100, True),
        "single_record_batches": (
            SRB_BUF,
            np.arange(n, dtype=np.int64),
            one,
            one * 0,
            piece_pos,
            piece_len,
            piece_pos,
            piece_len,
            np.zeros(n, np.uint8),
            -1,
        ),
        "digest_stream": (SRB_BUF, np.arange(n, dtype=np.int64), one, piece_pos, piece_len, piece_pos, piece_len, True),
        "v2_batches": (batch * n, np.arange(n, dtype=np.int64) * len(batch), one * len(batch)),
        "v2_records": (batch * n, np.arange(n, dtype=np.int64) * len(batch), one * len(batch)),
        "legacy_run": (message * n, np.arange(n, dtype=np.int64) * len(message), one * len(message)),
        # its loop is the shortest per item: as many items as the others have bytes
        "index_entries": (np.full(n * 100, 100), np.arange(n * 100), np.arange(n * 100), 4096, *STATE),
    }


@pytest.mark.parametrize("name", list(long_calls(1)))
def test_each_loop_lets_other_threads_run(name):
    """With a switch interval of an hour the interpreter never takes the GIL from this thread, so the other thread,
    woken just before, can run while a call is in progress only if the call's loop releases the GIL itself: the
    driver's conversion then runs beside Dask's scheduler and dashboard, and a worker's event loop keeps answering."""
    args = long_calls()[name]
    function = getattr(speedups, name)
    function(*args)  # valid arguments: this returns
    calling, seen = threading.Event(), []
    wake = threading.Lock()
    wake.acquire()

    def other() -> None:
        with wake:  # blocks without the GIL until released below
            seen.append(calling.is_set())

    thread = threading.Thread(target=other)
    thread.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(3600)
    try:
        calling.set()
        wake.release()
        for _ in range(2000):
            function(*args)
            if seen:
                break
        calling.clear()
    finally:
        sys.setswitchinterval(interval)
    thread.join()
    assert seen == [True]


@pytest.mark.parametrize("name", list(long_calls(1)))
def test_arrays_rewritten_by_another_thread_never_break_a_loop(name):
    """Without the GIL another thread can write to the arrays between a function's checking pass and its loop: the
    loop checks again what it reads and writes, so the call returns or raises RuntimeError, never reads or writes
    out of bounds (a crash here kills the run; under the ASan build of benchmarks/README.md, so would a stray read).
    The other thread gets the GIL while a call is in progress, that is while its loop runs, and then writes hostile
    values into the arrays; they are made valid again between calls."""
    args = long_calls()[name]
    columns = [a for a in args if isinstance(a, np.ndarray) and a.dtype == np.int64]
    pristine = [c.copy() for c in columns]
    hostile = i64(-1, 2**31, I64_MAX, I64_MIN, 1 << 40, 10**6)
    rng = np.random.default_rng(1)
    calling, done = threading.Event(), threading.Event()

    def rewrite() -> None:
        while not done.is_set():
            if calling.is_set():
                column = columns[rng.integers(len(columns))]
                column[rng.integers(len(column), size=64)] = hostile[rng.integers(len(hostile))]
            time.sleep(0)

    thread = threading.Thread(target=rewrite)
    thread.start()
    outcomes: Counter[str] = Counter()
    try:
        for _ in range(300):
            calling.set()
            try:
                getattr(speedups, name)(*args)
                outcomes["returned"] += 1
            except (RuntimeError, *REFUSED) as exc:
                outcomes[type(exc).__name__] += 1
            calling.clear()
            for column, valid in zip(columns, pristine):
                column[:] = valid
    finally:
        done.set()
        thread.join()
    assert outcomes["RuntimeError"] > 0  # the writes did land inside loops, and each loop noticed
