"""The conversion options several verbs share (``plan``, ``rehearse``, ``prestage``), and the ConvertOptions they
mean: one place, so that equal flags always mean equal options (a staged conversion is used only when they are)."""

from __future__ import annotations

import argparse

from migrate.model.plan_tree import (
    DEFAULT_MAX_MESSAGE_BYTES,
    MAX_SEGMENT_BYTES,
    Codec,
    ConvertOptions,
    DigestAlgorithm,
    TimestampPolicy,
)


def add_conversion_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--topics", help="only topics whose whole name matches this regular expression")
    g.add_argument("--target", choices=["v2", "v1"], default="v2", help="target message format (default v2)")
    g.add_argument(
        "--timestamps",
        choices=[t.value for t in TimestampPolicy],
        default=TimestampPolicy.MTIME.value,
        help="timestamps for v0 records, which have none: 'mtime' = LogAppendTime at the segment's mtime, so time "
        "retention and timestamp search keep working (default); 'none' = CreateTime -1, exactly what Kafka 4's "
        "cleaner writes. v1 timestamps are always kept.",
    )
    g.add_argument(
        "--leader-epoch",
        type=int,
        help="partition leader epoch of converted batches. Default: per partition, the first epoch of its "
        "leader-epoch-checkpoint, else 0. -1 is what Kafka's cleaner writes, but a follower fetching such batches "
        "fails (LeaderEpochFileCache rejects negative epochs).",
    )
    g.add_argument("--compression", choices=[c.value for c in Codec], help="recompress every batch with this codec")
    g.add_argument(
        "--pack-bytes",
        type=int,
        help="group uncompressed legacy messages into v2 batches of up to N bytes (much smaller output). Replicas "
        "converted with different settings then differ in batch boundaries: use the same plan options on every "
        "broker, or leave this off.",
    )
    g.add_argument(
        "--tombstone-flag", action="store_true", help="KIP-87: mark null-value records with bit 5 of their attributes"
    )
    g.add_argument("--index-interval-bytes", type=int, default=4096, help="index.interval.bytes (default 4096)")
    g.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help="the topics' max.message.bytes (default 1048588): a converted batch larger than this and than its "
        "source entry is refused",
    )
    g.add_argument(
        "--max-segment-bytes",
        type=int,
        help=f"the topics' segment.bytes (default and ceiling {MAX_SEGMENT_BYTES}, the largest .log Kafka opens): "
        "under Kafka's rules a source whose conversion passes it becomes several segments cut at batch boundaries, "
        "each named after its first batch's base offset, as Kafka's own split of an overflowed segment writes them",
    )
    g.add_argument(
        "--digest",
        choices=[d.value for d in DigestAlgorithm],
        default=DigestAlgorithm.XXH3_128.value,
        help="record digest the run checks its output with: xxh3-128 (default, several GB/s) or sha256 (about 2x "
        "the verify cost; equals `oracle dump --summary`, so a run's digests can be checked with Kafka's reader)",
    )


def convert_options(args: argparse.Namespace) -> ConvertOptions:
    """The ConvertOptions of the flags ``add_conversion_options`` adds."""
    return ConvertOptions(
        target_magic=2 if args.target == "v2" else 1,
        timestamps=TimestampPolicy(args.timestamps),
        compression=Codec(args.compression) if args.compression else None,
        pack_bytes=args.pack_bytes,
        tombstone_flag=args.tombstone_flag,
        index_interval_bytes=args.index_interval_bytes,
        max_message_bytes=args.max_message_bytes,
        digest=DigestAlgorithm(args.digest),
        # the ceiling is the default: left out of the plan, so plans made without the flag keep their ids
        max_segment_bytes=None if args.max_segment_bytes in (None, MAX_SEGMENT_BYTES) else args.max_segment_bytes,
    )
