"""Generate large uncompressed legacy (magic 0 or 1) Kafka segments fast, for benchmarks.

Every message has the same layout (fixed key and value sizes), so a chunk of messages is one 2-D uint8 array built
with a handful of numpy operations: offsets, sizes, magic, timestamps (v1), keys (the offset in zero-padded
decimal), values (windows of a deterministic text-like or random pool, one row copy each). Only the CRC-32 is per
message: one ``zlib.crc32`` call per message (driven by ``map``: no Python frame per message).

    python benchmarks/gen_legacy.py OUT_DIR --records 1000000 --value-bytes 100 [--key-bytes 10] [--magic 0]

writes ``OUT_DIR/<topic>-0/00000000000000000000.log`` (``--partitions N`` writes ``<topic>-0`` .. ``<topic>-N-1``)
and, unless ``--no-broker-files``, the files a cleanly stopped broker keeps around them (meta.properties,
.kafka_cleanshutdown, checkpoints, partition.metadata, leader-epoch-checkpoint), written by the project's one log-dir
writer, ``migrate.demo.legacy_logdir``, so ``kafka-log-migrate plan`` accepts the directory. The same arguments always
give the same bytes.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from migrate.demo import legacy_logdir

TEXT_WORDS = (
    b"kafka log segment offset record batch broker topic partition replica leader follower consumer producer "
    b"message value key timestamp index compaction cleaner retention fetch commit transaction epoch "
)
POOL_BYTES = 1 << 20  # values are windows of this pool: text-like (compressible) or random bytes
CHUNK_BYTES = 32 << 20  # messages are built this many bytes at a time
START_MS = 1_500_000_000_000  # v1 timestamps: START_MS + offset * STEP_MS (CreateTime)
STEP_MS = 10


def message_size(key_bytes: int, value_bytes: int, magic: int) -> int:
    """Bytes of one log entry: offset (8) + size (4) + crc, magic, attributes, [timestamp], key, value."""
    return 12 + 4 + 2 + (8 if magic == 1 else 0) + 4 + max(key_bytes, 0) + 4 + value_bytes


def _pool(kind: str, value_bytes: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 0x6B61666B61])
    size = POOL_BYTES + value_bytes
    if kind == "random":
        return np.frombuffer(rng.bytes(size), np.uint8)
    if kind != "text":
        raise ValueError(f"unknown value kind {kind!r}: text or random")
    words = TEXT_WORDS.split()
    picks = rng.integers(0, len(words), size // 4 + 16)
    text = b" ".join(words[i] for i in picks.tolist())
    while len(text) < size:
        text += b" " + text
    return np.frombuffer(text[:size], np.uint8)


def legacy_messages(
    first_offset: int,
    count: int,
    *,
    key_bytes: int = 10,
    value_bytes: int = 100,
    magic: int = 0,
    kind: str = "text",
    seed: int = 1,
    pool: np.ndarray | None = None,
) -> bytes:
    """``count`` uncompressed magic ``magic`` messages with offsets ``first_offset`` ... , one log entry each.

    Keys are the offset in zero-padded decimal cut or padded to ``key_bytes`` (-1: null keys); values are
    ``value_bytes`` bytes of a text-like (``kind="text"``) or random pool, at a pseudo-random position per offset.
    v1 messages are CreateTime with timestamp ``START_MS + offset * STEP_MS``.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy magic is 0 or 1, not {magic}")
    if value_bytes < 0 or key_bytes < -1 or count < 0 or first_offset < 0:
        raise ValueError("negative size, count or offset")
    if pool is None:
        pool = _pool(kind, value_bytes, seed)
    width = message_size(key_bytes, value_bytes, magic)
    rows = np.empty((count, width), np.uint8)
    offsets = np.arange(first_offset, first_offset + count, dtype=np.int64)
    rows[:, 0:8] = offsets.astype(">i8").view(np.uint8).reshape(count, 8)
    rows[:, 8:12] = np.frombuffer((width - 12).to_bytes(4, "big"), np.uint8)
    rows[:, 16] = magic
    rows[:, 17] = 0  # attributes: no compression, CreateTime
    at = 18
    if magic == 1:
        rows[:, 18:26] = (START_MS + offsets * STEP_MS).astype(">i8").view(np.uint8).reshape(count, 8)
        at = 26
    rows[:, at : at + 4] = np.frombuffer(key_bytes.to_bytes(4, "big", signed=True), np.uint8)
    at += 4
    if key_bytes > 0:
        digits = max(key_bytes, 20)
        keys = np.char.zfill(offsets.astype(f"S{digits}"), digits)  # zero-padded decimal, last key_bytes digits
        rows[:, at : at + key_bytes] = np.frombuffer(keys.tobytes(), np.uint8).reshape(count, digits)[:, -key_bytes:]
        at += key_bytes
    rows[:, at : at + 4] = np.frombuffer(value_bytes.to_bytes(4, "big"), np.uint8)
    at += 4
    if value_bytes:
        # a deterministic start per offset (a multiplicative hash), then one row copy per message
        starts = ((offsets.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) % np.uint64(
            len(pool) - value_bytes + 1
        )
        windows = np.lib.stride_tricks.sliding_window_view(pool, value_bytes)
        rows[:, at:] = windows[starts.astype(np.int64)]
    flat = rows.reshape(-1)
    bodies = map(
        memoryview(flat).__getitem__,
        map(slice, range(16, count * width, width), range(width, count * width + 1, width)),
    )
    crcs = np.fromiter(map(zlib.crc32, bodies), np.uint32, count)  # magic..end of each message
    rows[:, 12:16] = crcs.astype(">u4").view(np.uint8).reshape(count, 4)
    return flat.tobytes()


def iter_segment_chunks(
    records: int,
    *,
    key_bytes: int = 10,
    value_bytes: int = 100,
    magic: int = 0,
    kind: str = "text",
    seed: int = 1,
    first_offset: int = 0,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[bytes]:
    """A segment of ``records`` messages as consecutive byte chunks of about ``chunk_bytes`` each."""
    pool = _pool(kind, value_bytes, seed)
    per_chunk = max(1, chunk_bytes // message_size(key_bytes, value_bytes, magic))
    for start in range(0, records, per_chunk):
        yield legacy_messages(
            first_offset + start,
            min(per_chunk, records - start),
            key_bytes=key_bytes,
            value_bytes=value_bytes,
            magic=magic,
            kind=kind,
            seed=seed,
            pool=pool,
        )


def segment_bytes(records: int, **kwargs: int | str) -> bytes:
    """A whole segment in memory (same arguments as ``iter_segment_chunks``)."""
    return b"".join(iter_segment_chunks(records, **kwargs))  # type: ignore[arg-type]


def write_segment(path: Path, records: int, **kwargs: int | str) -> Path:
    """Write one segment file (same arguments as ``iter_segment_chunks``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for chunk in iter_segment_chunks(records, **kwargs):  # type: ignore[arg-type]
            f.write(chunk)
    return path


def write_log_dir(
    root: Path,
    records: int,
    *,
    topic: str = "bench",
    partitions: int = 1,
    broker_files: bool = True,
    **kwargs: int | str,
) -> list[Path]:
    """``root/<topic>-<p>/00000000000000000000.log`` for each partition p; returns the segment paths. With
    ``broker_files``, the files a cleanly stopped broker keeps around them (``migrate.demo.legacy_logdir``)."""
    root.mkdir(parents=True, exist_ok=True)
    seed = int(kwargs.pop("seed", 1))
    segments = [
        write_segment(root / f"{topic}-{p}" / f"{0:020d}.log", records, seed=seed + p, **kwargs)
        for p in range(partitions)
    ]
    if broker_files:
        end = int(kwargs.get("first_offset", 0)) + records
        legacy_logdir.write_broker_files(root, [legacy_logdir.PartitionFiles(topic, p, end) for p in range(partitions)])
    return segments


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="log dir to write into (created if missing)")
    ap.add_argument("--records", "-n", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", "-v", type=int, default=100)
    ap.add_argument("--key-bytes", "-k", type=int, default=10, help="-1 for null keys")
    ap.add_argument("--magic", type=int, choices=[0, 1], default=0)
    ap.add_argument("--kind", choices=["text", "random"], default="text", help="value bytes")
    ap.add_argument("--topic", default="bench")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-broker-files", action="store_true", help="segments only: no meta.properties, checkpoints ...")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    paths = write_log_dir(
        args.out,
        args.records,
        topic=args.topic,
        partitions=args.partitions,
        broker_files=not args.no_broker_files,
        key_bytes=args.key_bytes,
        value_bytes=args.value_bytes,
        magic=args.magic,
        kind=args.kind,
        seed=args.seed,
    )
    seconds = time.perf_counter() - start
    total = sum(p.stat().st_size for p in paths)
    for p in paths:
        print(p)
    print(f"{len(paths)} segment(s), {total / 2**20:.1f} MiB in {seconds:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
