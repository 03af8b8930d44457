"""The tiny-segment paths give what the general paths give: the Python walk of a small buffer (entries and refusals),
the edges digest of bytes read whole, a whole-file read, and a small source converted in memory against the same
source converted through the chunked reader."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from migrate.errors import CorruptRecordError, UnsupportedFormatError
from migrate.format import entries, legacy
from migrate.format.records import Record
from migrate.model.plan_tree import CONVERTED_FILES, ConvertOptions
from migrate.model.run_state import SegmentTask
from migrate.segment import convert
from migrate.segment.identity import EDGE_BYTES, edges_digest, edges_digest_of_bytes
from migrate.segment.reader import read_whole
from migrate.segment.verify import verify_segment


def _messages(n: int, base: int = 0, value: int = 20) -> bytes:
    return b"".join(legacy.encode_messages([Record(base + i, -1, b"k", b"v" * value)], 0) for i in range(n))


def _general_walk(buf: bytes) -> entries.Walk:
    saved = entries.SMALL_WALK_BYTES
    entries.SMALL_WALK_BYTES = -1
    try:
        return entries.walk_entries(buf)
    finally:
        entries.SMALL_WALK_BYTES = saved


def _outcome(walk, buf):
    try:
        w = walk(buf)
    except (CorruptRecordError, UnsupportedFormatError) as exc:
        return type(exc).__name__, str(exc)
    tail = None if w.tail is None else (w.tail.position, w.tail.size, w.tail.reason)
    return w.positions.tolist(), w.sizes.tolist(), w.magics.tolist(), w.magics.dtype, w.consumed, tail


def _with_size(buf: bytes, at: int, size: int) -> bytes:
    return buf[: at + 8] + struct.pack(">i", size) + buf[at + 12 :]


@pytest.mark.parametrize("cut", [0, 5, 16, 17, 40, 46, 47, 48, 63, 64, 93, 94])
def test_the_python_walk_of_a_small_buffer_is_the_walk(cut):
    data = _messages(2)  # two 47-byte messages
    for buf in (data[:cut], bytearray(data[:cut]), memoryview(bytearray(data[:cut]))):
        assert _outcome(entries.walk_entries, buf) == _outcome(_general_walk, bytes(buf))


def test_the_python_walk_refuses_what_the_walk_refuses():
    data = _messages(3)
    at = entries.walk_entries(data).positions.tolist()
    bad_size = _with_size(data, at[1], 3)
    bad_magic = data[:16] + b"\x07" + data[17:]
    both = _with_size(bad_magic, at[2], 0)  # a bad size after an unknown magic: the size is named, as the walk does
    for buf in (bad_size, bad_magic, both):
        got = _outcome(entries.walk_entries, buf)
        assert got == _outcome(_general_walk, buf) and isinstance(got[0], str)
    assert _outcome(entries.walk_entries, both)[0] == "CorruptRecordError"


def test_a_small_run_whose_offsets_do_not_increase_is_refused_as_before():
    data = _messages(1, base=5) + _messages(1, base=5)
    with pytest.raises(CorruptRecordError, match="does not increase"):
        entries.read_entries(data)


@pytest.mark.parametrize("size", [0, 1, 100, EDGE_BYTES, EDGE_BYTES + 1, 2 * EDGE_BYTES + 7])
def test_the_edges_of_bytes_read_whole_are_the_edges_of_the_file(tmp_path, size):
    path = tmp_path / "f"
    data = np.random.default_rng(size).bytes(size)
    path.write_bytes(data)
    assert edges_digest_of_bytes(data, size) == edges_digest(path)
    with pytest.raises(ValueError):
        edges_digest_of_bytes(data[:-1] if size else b"x", size)


def test_read_whole_only_a_file_of_the_size_given(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abcdef")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_whole(fd, 6) == b"abcdef"
        assert read_whole(fd, 5) is None  # grew since the size was taken
        assert read_whole(fd, 7) is None  # shrank
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
    finally:
        os.close(fd)


@pytest.mark.parametrize("n", [1, 2, 30])
def test_a_small_source_converts_to_the_bytes_and_result_of_the_chunked_path(tmp_path, monkeypatch, n):
    live = tmp_path / "live"
    live.mkdir()
    source = live / f"{0:020d}.log"
    source.write_bytes(_messages(n, value=300))
    os.utime(source, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    options = ConvertOptions(index_interval_bytes=1024)

    def run(staging: str):
        return convert.convert_segment(SegmentTask(str(source), str(tmp_path / staging), 0, options))

    small = run("small")
    monkeypatch.setattr(convert, "SMALL_SEGMENT_BYTES", -1)
    general = run("general")
    for sfx in CONVERTED_FILES:
        assert (tmp_path / "small" / f"{0:020d}{sfx}").read_bytes() == (
            tmp_path / "general" / f"{0:020d}{sfx}"
        ).read_bytes()
    for field in ("source_digest", "output_digest_ts", "source_edges", "records", "output_bytes", "max_timestamp"):
        assert getattr(small, field) == getattr(general, field)
    assert [s.size for s in small.output_stats.values()] == [s.size for s in general.output_stats.values()]
    assert verify_segment(small, options).ok and verify_segment(general, options).ok
