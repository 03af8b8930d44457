"""A broker-shaped log dir of many tiny v0 segments: ``partitions`` partitions x ``segments`` segments x ``records``
messages, for the control plane's per-segment cost.

Segment k of every partition holds offsets ``k*records ...`` and the same bytes in every partition (generated once
per k), so a million segments are written in about a minute on tmpfs; the broker's files around them come from
``migrate.demo.legacy_logdir`` so ``plan`` checks them as it checks a real log dir.

    python benchmarks/gen_many.py DIR --partitions 100000 --segments 10 [--records 2] [--value-bytes 20]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_legacy import legacy_messages

from migrate.demo.legacy_logdir import PartitionFiles, write_broker_files

SEGMENT_MTIME_NS = 1_500_000_000 * 10**9
TOPIC = "many"


def write_many(root: Path, partitions: int, segments: int, records: int = 2, value_bytes: int = 20) -> int:
    """Write the log dir; returns its segment bytes."""
    ends = records * segments
    write_broker_files(root, [PartitionFiles(TOPIC, p, ends, leader_epochs=()) for p in range(partitions)])
    bodies = [legacy_messages(k * records, records, value_bytes=value_bytes) for k in range(segments)]
    names = [f"{k * records:020d}.log" for k in range(segments)]
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for p in range(partitions):
        part = f"{root}/{TOPIC}-{p}/"
        for name, body in zip(names, bodies, strict=True):
            fd = os.open(part + name, flags, 0o644)
            try:
                os.write(fd, body)
            finally:
                os.close(fd)
            os.utime(part + name, ns=(SEGMENT_MTIME_NS, SEGMENT_MTIME_NS))
    return partitions * sum(map(len, bodies))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--records", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=20)
    args = parser.parse_args(argv)
    total = write_many(args.dir, args.partitions, args.segments, args.records, args.value_bytes)
    print(f"{args.partitions * args.segments} segments, {total} bytes in {args.dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
