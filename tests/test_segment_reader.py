"""Reading a segment in chunks into one reused buffer, and from an arbitrary byte to a limit: exactly the entries
that start in the range, whatever the chunk size, however the entries straddle chunk or range boundaries."""

from __future__ import annotations

import io

import numpy as np
import pytest

from migrate.format import legacy
from migrate.format.entries import walk_entries
from migrate.format.records import Record
from migrate.segment.reader import read_chunks


def _segment(n: int = 60, seed: int = 3) -> bytes:
    rng = np.random.default_rng(seed)
    return b"".join(
        legacy.encode_messages([Record(i, -1, b"k", rng.bytes(int(rng.integers(0, 900))))], 0) for i in range(n)
    )


def _read(data: bytes, chunk: int, start: int = 0, limit: int | None = None, reuse: bool = True) -> tuple[list, int]:
    src = io.BytesIO(data)
    src.seek(start)
    found, end = [], start
    for c in read_chunks(src, "seg", chunk, reuse=reuse, start=start, limit=limit):
        found += [c.position + p for p in walk_entries(c.buffer[: c.entries.consumed]).positions.tolist()]
        end = c.end
    return found, end


@pytest.mark.parametrize("chunk", [1, 17, 100, 1000, 1 << 20])
def test_every_entry_once_whatever_the_chunk(chunk):
    data = _segment()
    everything = walk_entries(data).positions.tolist()
    assert _read(data, chunk) == (everything, len(data))
    assert _read(data, chunk, reuse=False) == (everything, len(data))


@pytest.mark.parametrize("chunk", [1, 50, 700, 1 << 20])
def test_a_range_reads_the_entries_that_start_in_it_and_the_one_that_straddles_its_end(chunk):
    data = _segment()
    starts = walk_entries(data).positions.tolist()
    rng = np.random.default_rng(chunk)
    for _ in range(40):
        start = int(rng.choice(starts))
        limit = int(rng.integers(start + 1, len(data) + 1))
        want = [p for p in starts if start <= p < limit]
        stop = min([p for p in starts if p >= limit], default=len(data))
        assert _read(data, chunk, start, limit) == (want, stop), (start, limit)


def test_a_range_ending_on_an_entry_boundary_reads_nothing_past_it():
    data = _segment()
    starts = walk_entries(data).positions.tolist()
    src = io.BytesIO(data)
    chunks = list(read_chunks(src, "seg", 1 << 20, reuse=True, limit=starts[10]))
    assert chunks[-1].end == starts[10] and src.tell() == starts[10]


def test_a_reused_buffer_is_overwritten_by_the_next_chunk_and_a_copy_is_not():
    data = _segment()
    reused = [c.buffer for c in read_chunks(io.BytesIO(data), "seg", 2000, reuse=True)]
    copies = [c.buffer for c in read_chunks(io.BytesIO(data), "seg", 2000)]
    assert isinstance(reused[0], memoryview) and isinstance(copies[0], bytes)
    assert len(reused) > 10 and len(copies) > 10
    assert bytes(copies[0][:12]) == data[:12] != bytes(reused[0][:12])  # a later entry's header is there now
