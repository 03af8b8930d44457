"""Replica consistency on real Kafka-written bytes: identical replicas agree, a replica with one changed record
(its CRC fixed, so every reader accepts it) is named with the offset range where it differs."""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

from conftest import LEGACY_LOGDIR
from segment_helpers import convert_logdir

from migrate.format.entries import walk_entries
from migrate.kafka.names import FileKind
from migrate.model.plan_tree import ConvertOptions
from migrate.stages.replicas import common_range, compare, digest_replica, offset_range

PARTITION = "plain-v0-0"  # 3 segments, offsets 0..104


def replica(tmp_path: Path, name: str) -> Path:
    part = tmp_path / name / PARTITION
    shutil.copytree(LEGACY_LOGDIR / PARTITION, part)
    return part


def segments(part: Path) -> list[str]:
    return [str(p) for p in sorted(part.glob("*.log"))]


def change_one_value(segment: Path, entry_index: int) -> int:
    """Flip the last byte of one v0 message's value and fix its CRC-32; returns that message's offset."""
    data = bytearray(segment.read_bytes())
    walk = walk_entries(bytes(data))
    p, size = int(walk.positions[entry_index]), int(walk.sizes[entry_index])
    data[p + size - 1] ^= 0x01
    struct.pack_into(">I", data, p + 12, zlib.crc32(bytes(data[p + 16 : p + size])) & 0xFFFFFFFF)
    segment.write_bytes(bytes(data))
    return struct.unpack_from(">q", data, p)[0]


def digests(parts: dict[int, Path], bucket: int = 10):
    ranges = [offset_range(segments(p), PARTITION, b) for b, p in parts.items()]
    lo, hi = common_range(ranges)
    return [digest_replica(segments(p), PARTITION, b, lo, hi, bucket) for b, p in parts.items()], (lo, hi)


def test_identical_replicas_agree_and_convert_to_identical_bytes(tmp_path):
    parts = {1: replica(tmp_path, "b1"), 2: replica(tmp_path, "b2")}
    found, (lo, hi) = digests(parts)
    assert (lo, hi) == (0, 104) and len(found[0].buckets) == 11
    assert compare(found) is None
    outputs = {
        b: convert_logdir(p.parent, tmp_path / f"out{b}", ConvertOptions(timestamps="none")) for b, p in parts.items()
    }
    for key in outputs[1]:
        for sfx in (FileKind.LOG, FileKind.INDEX, FileKind.TIME_INDEX):
            assert Path(outputs[1][key].outputs[sfx]).read_bytes() == Path(outputs[2][key].outputs[sfx]).read_bytes()


def test_a_divergent_replica_is_named_with_the_first_differing_offset_range(tmp_path):
    parts = {1: replica(tmp_path, "b1"), 2: replica(tmp_path, "b2"), 3: replica(tmp_path, "b3")}
    changed = change_one_value(parts[3] / "00000000000000000040.log", 7)
    assert changed == 47
    found, _ = digests(parts)
    divergence = compare(found)
    assert divergence is not None
    assert divergence.partition == PARTITION and divergence.brokers == (1, 2, 3)
    assert (divergence.first_offset, divergence.last_offset) == (40, 49)
    assert divergence.digests["1"] == divergence.digests["2"] != divergence.digests["3"]


def test_only_the_range_every_replica_holds_is_compared(tmp_path):
    parts = {1: replica(tmp_path, "b1"), 2: replica(tmp_path, "b2")}
    (parts[2] / "00000000000000000000.log").unlink()  # retention removed broker 2's oldest segment
    change_one_value(parts[1] / "00000000000000000000.log", 7)  # a difference only broker 1 still holds
    found, (lo, hi) = digests(parts)
    assert (lo, hi) == (40, 104)
    assert compare(found) is None
