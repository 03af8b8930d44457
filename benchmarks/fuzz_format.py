"""Fuzz the format layer's reader with damaged Kafka segments.

Every case takes a fixture segment (bytes Apache Kafka wrote), damages it (bit flips, overwritten bytes, truncation,
zeroed ranges, cut or doubled slices, header fields set to extreme values, an entry shrunk to end the buffer, or
the decompressed inside of a compressed entry damaged and recompressed), reads it with
``migrate.format.entries.read_entries``, then iterates and digests every record. Half the cases recompute every
entry's CRC after the damage, so it reaches the decoders behind the checksums instead of stopping at the first CRC
check. The only acceptable outcomes are a clean read or ``migrate.errors.LocatedError`` (located bad input);
anything else is a crash, including a MemoryError under the address-space limit (a few damaged bytes must not make
the reader allocate gigabytes).

    python benchmarks/fuzz_format.py [--cases 100000] [--seed 1] [--fixtures DIR ...] [--memory-limit-mb 4096]
                                     [--max-seconds S] [--json] [--show 5]
    python benchmarks/fuzz_format.py --seed 1 --replay 1234      # one case again, with its traceback

Cases are derived from (seed, case number) alone, so any case can be replayed. Prints the count of each outcome;
exits 1 if any case crashed. tests/test_format_fuzz.py runs the same engine with a few thousand cases.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import struct
import sys
import time
import traceback
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import crc32c as _crc32c

from migrate.errors import LocatedError
from migrate.format import batch as v2
from migrate.format import codecs, legacy
from migrate.format.digest import LogDigest
from migrate.format.entries import read_entries
from migrate.format.records import Compression

DEFAULT_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "legacy-logdir"
EXTREMES_64 = [0, 1, -1, 2**31 - 1, 2**31, 2**62, 2**63 - 1, -(2**63), -2]
EXTREMES_32 = [0, 1, -1, 13, 14, 2**31 - 1, -(2**31), 2**16, 60, 61]
CRASH = "CRASH"


@dataclass
class Segment:
    name: str
    data: bytes
    compressed: list[tuple[int, int, int, int]] = field(default_factory=list)  # (position, size, magic, codec)
    entries: list[tuple[int, int, int]] = field(default_factory=list)  # (position, size, magic)


def load_segments(dirs: list[Path]) -> list[Segment]:
    out = []
    for d in dirs:
        for path in sorted(d.glob("*/*.log")):
            data = path.read_bytes()
            if not data:
                continue
            seg = Segment(f"{path.parent.name}/{path.name}", data)
            for item in read_entries(data).items:
                if isinstance(item, legacy.LegacyRun):
                    for p, s, m in zip(item.positions.tolist(), item.sizes.tolist(), item.magics.tolist()):
                        seg.entries.append((p, s, m))
                    continue
                magic = item.magic if isinstance(item, legacy.LegacyWrapper) else v2.MAGIC
                seg.entries.append((item.position, item.size, magic))
                if item.compression:
                    seg.compressed.append((item.position, item.size, magic, int(item.compression)))
            out.append(seg)
    return out


# --- damage ---------------------------------------------------------------------------------------------------


def fix_crcs(buf: bytearray) -> None:
    """Recompute the CRC of every complete entry (CRC-32 for magic 0/1, CRC-32C for v2), as a forger would."""
    pos, end = 0, len(buf)
    while pos + 17 <= end:
        (size,) = struct.unpack_from(">i", buf, pos + 8)
        nxt = pos + 12 + size
        if size < 14 or nxt > end:
            return
        magic = buf[pos + 16]
        if magic in (0, 1):
            struct.pack_into(">I", buf, pos + 12, zlib.crc32(buf[pos + 16 : nxt]) & 0xFFFFFFFF)
        elif magic == 2 and size + 12 >= v2.RECORD_BATCH_OVERHEAD:
            struct.pack_into(">I", buf, pos + 17, _crc32c.crc32c(bytes(buf[pos + 21 : nxt])))
        pos = nxt


def flip_bits(rng: random.Random, buf: bytearray) -> None:
    for _ in range(rng.randint(1, 8)):
        if buf:
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)


def set_bytes(rng: random.Random, buf: bytearray) -> None:
    for _ in range(rng.randint(1, 4)):
        if buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)


def truncate(rng: random.Random, buf: bytearray) -> bytearray:
    return buf[: rng.randrange(len(buf))] if buf else buf


def zero_range(rng: random.Random, buf: bytearray) -> None:
    if buf:
        a = rng.randrange(len(buf))
        b = min(len(buf), a + rng.choice([1, 4, 8, 64, 4096]))
        buf[a:b] = bytes(b - a)


def splice(rng: random.Random, buf: bytearray) -> bytearray:
    if len(buf) < 2:
        return buf
    a = rng.randrange(len(buf))
    b = min(len(buf), a + rng.randint(1, 64))
    return buf[:a] + buf[b:] if rng.random() < 0.5 else buf[:b] + buf[a:]


def set_field(rng: random.Random, buf: bytearray, entries: list[tuple[int, int, int]]) -> None:
    """Set one header field of one entry to an extreme or random value."""
    if not entries:
        return set_bytes(rng, buf)
    pos, size, magic = rng.choice(entries)
    if magic == v2.MAGIC:
        fields = [(0, ">q"), (8, ">i"), (12, ">i"), (16, ">b"), (21, ">h"), (23, ">i"), (27, ">q"), (35, ">q")]
        fields += [(43, ">q"), (51, ">h"), (53, ">i"), (57, ">i")]
    else:
        fields = [(0, ">q"), (8, ">i"), (16, ">b"), (17, ">b")]
        key_at = legacy.KEY_LENGTH_OFFSET[magic]
        fields += [(key_at, ">i")] + ([(18, ">q")] if magic == 1 else [])
        if size >= key_at + 8:
            (key_len,) = struct.unpack_from(">i", buf, pos + key_at)
            fields.append((key_at + 4 + max(key_len, 0), ">i"))  # the value length
    at, fmt = rng.choice(fields)
    if pos + at + struct.calcsize(fmt) > len(buf):
        return
    width = struct.calcsize(fmt)
    if width == 8:
        value = rng.choice([*EXTREMES_64, rng.randrange(-(2**63), 2**63)])
    elif width == 4:
        value = rng.choice([*EXTREMES_32, rng.randrange(-(2**31), 2**31)])
    elif width == 2:
        value = rng.randrange(-(2**15), 2**15)
    else:
        value = rng.randrange(-128, 128)
    struct.pack_into(fmt, buf, pos + at, value)


def shrink(rng: random.Random, buf: bytearray, entries: list[tuple[int, int, int]]) -> bytearray:
    """Make one entry declare a smaller size (at least 14) and end the buffer there: a short last entry."""
    if not entries:
        return truncate(rng, buf)
    pos, size, _ = rng.choice(entries)
    new_size = rng.randint(14, max(14, size - 12))
    struct.pack_into(">i", buf, pos + 8, new_size)
    return buf[: pos + 12 + new_size]


def damage_inside(rng: random.Random, seg: Segment, buf: bytearray) -> bytearray:
    """Decompress one compressed entry, damage its inside, recompress it and rebuild the entry with valid CRCs."""
    if not seg.compressed:
        return bytearray(truncate(rng, buf))
    pos, size, magic, codec = rng.choice(seg.compressed)
    # a v2 batch's records follow its header; a wrapper's value follows its null key's length and the value length
    value_at = v2.RECORD_BATCH_OVERHEAD if magic == v2.MAGIC else legacy.KEY_LENGTH_OFFSET[magic] + 8
    payload_at = pos + value_at
    inner = bytearray(codecs.decompress(codec, bytes(buf[payload_at : pos + size]), magic))
    how = rng.randrange(5)
    if how == 0:
        flip_bits(rng, inner)
    elif how == 1:
        inner = truncate(rng, inner)
    elif how == 2:
        inner = splice(rng, inner)
    elif how == 3 and magic < 2:
        inner_entries = []
        p = 0
        while p + 17 <= len(inner):
            (s,) = struct.unpack_from(">i", inner, p + 8)
            if s < 14 or p + 12 + s > len(inner):
                break
            inner_entries.append((p, s + 12, inner[p + 16]))
            p += 12 + s
        set_field(rng, inner, inner_entries)
    else:
        set_bytes(rng, inner)
    if magic < 2 and rng.random() < 0.7:
        fix_crcs(inner)  # the inner messages' own CRCs
    value = codecs.compress(Compression(codec), bytes(inner), magic)
    if magic == v2.MAGIC:
        header = bytearray(buf[pos : pos + v2.RECORD_BATCH_OVERHEAD])
        struct.pack_into(">i", header, 8, v2.RECORD_BATCH_OVERHEAD - 12 + len(value))
        entry = header + value
        struct.pack_into(">I", entry, 17, _crc32c.crc32c(bytes(entry[21:])))
    else:
        offset, _, _, _, attributes = struct.unpack_from(">qiIbb", buf, pos)
        timestamp = struct.unpack_from(">q", buf, pos + 18)[0] if magic == 1 else -1
        entry = bytearray(legacy.encode_message(offset, magic, attributes, timestamp, None, value))
    return buf[:pos] + entry + buf[pos + size :]


MUTATIONS = ["flip", "bytes", "truncate", "truncate+flip", "zero", "splice", "field", "shrink", "inside"]


def mutate(rng: random.Random, seg: Segment) -> tuple[str, bytes]:
    kind = rng.choice(MUTATIONS)
    buf = bytearray(seg.data)
    if kind == "flip":
        flip_bits(rng, buf)
    elif kind == "bytes":
        set_bytes(rng, buf)
    elif kind == "truncate":
        buf = truncate(rng, buf)
    elif kind == "truncate+flip":
        buf = truncate(rng, buf)
        flip_bits(rng, buf)
    elif kind == "zero":
        zero_range(rng, buf)
    elif kind == "splice":
        buf = splice(rng, buf)
    elif kind == "field":
        set_field(rng, buf, seg.entries)
    elif kind == "shrink":
        buf = shrink(rng, buf, seg.entries)
    else:
        buf = damage_inside(rng, seg, buf)
    if kind != "inside" and rng.random() < 0.5:
        fix_crcs(buf)
        kind += "+crc"
    return kind, bytes(buf)


# --- one case ---------------------------------------------------------------------------------------------------


def read_everything(data: bytes) -> str:
    """Read, iterate and digest every record; return the outcome (raises whatever the reader raises)."""
    entries = read_entries(data)
    digest = LogDigest()
    for item in entries.items:
        digest.update(item.records)
    n = sum(1 for _ in entries.records())
    tail = entries.tail.size if entries.tail else 0
    if entries.consumed + tail != len(data) or n != digest.records:
        raise AssertionError(f"bytes or records unaccounted for: consumed {entries.consumed} + tail {tail}")
    return "read" if entries.tail is None else "read with tail"


def run_case(seed: int, index: int, segments: list[Segment]) -> tuple[str, str, str, str]:
    """(outcome, segment, mutation, detail) of case ``index``: outcome is 'read', 'read with tail', the
    CorruptRecordError class name, or 'CRASH <type>'."""
    rng = random.Random(f"{seed}:{index}")
    seg = rng.choice(segments)
    kind, data = mutate(rng, seg)
    try:
        return read_everything(data), seg.name, kind, ""
    except LocatedError as exc:
        if exc.position is not None and not 0 <= exc.position < max(len(data), 1):
            return f"{CRASH} bad position", seg.name, kind, str(exc)
        return type(exc).__name__, seg.name, kind, exc.reason
    except Exception as exc:
        return f"{CRASH} {type(exc).__name__}", seg.name, kind, f"{exc!r}"[:300]


@dataclass
class Report:
    outcomes: Counter = field(default_factory=Counter)
    mutations: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    crashes: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def cases(self) -> int:
        return sum(self.outcomes.values())


def reason_kind(reason: str) -> str:
    for needle, kind in [
        ("CRC", "checksum"),
        ("decompress", "codec"),
        ("gzip", "codec"),
        ("snappy", "codec"),
        ("LZ4", "codec"),
        ("zstd", "codec"),
        ("offset", "offsets"),
        ("size", "sizes"),
        ("length", "sizes"),
        ("magic", "magic"),
    ]:
        if needle in reason:
            return kind
    return "other"


def fuzz(segments: list[Segment], cases: int, seed: int, max_seconds: float | None = None) -> Report:
    report = Report()
    start = time.perf_counter()
    for i in range(cases):
        outcome, name, kind, detail = run_case(seed, i, segments)
        report.outcomes[outcome] += 1
        report.mutations[kind.removesuffix("+crc")] += 1
        if outcome.startswith(CRASH):
            report.crashes.append({"case": i, "segment": name, "mutation": kind, "outcome": outcome, "error": detail})
        elif outcome not in ("read", "read with tail"):
            report.reasons[reason_kind(detail)] += 1
        if max_seconds is not None and time.perf_counter() - start > max_seconds:
            break
    report.seconds = time.perf_counter() - start
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000, help="number of cases (default 100000)")
    parser.add_argument("--seed", type=int, default=1, help="seed; case i is derived from (seed, i) alone")
    parser.add_argument(
        "--fixtures", type=Path, nargs="+", default=[DEFAULT_FIXTURES], help="log dirs whose */*.log to damage"
    )
    parser.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    parser.add_argument(
        "--memory-limit-mb",
        type=int,
        default=4096,
        help="address-space limit (RLIMIT_AS), so that a huge allocation is a MemoryError crash (0 = none)",
    )
    parser.add_argument("--replay", type=int, default=None, help="run only this case, with its traceback")
    parser.add_argument("--show", type=int, default=5, help="crashing cases to print (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)
    if args.memory_limit_mb:
        limit = args.memory_limit_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    segments = load_segments(args.fixtures)
    if not segments:
        parser.error(f"no non-empty */*.log under {args.fixtures}")
    if args.replay is not None:
        rng = random.Random(f"{args.seed}:{args.replay}")
        seg = rng.choice(segments)
        kind, data = mutate(rng, seg)
        print(f"case {args.replay}: {seg.name}, {kind}, {len(data)} bytes")
        try:
            print(read_everything(data))
        except LocatedError as exc:
            print(f"{type(exc).__name__} at position {exc.position}: {exc.reason}")
        except Exception:  # a crash: show where
            traceback.print_exc()
            return 1
        return 0
    report = fuzz(segments, args.cases, args.seed, args.max_seconds)
    if args.json:
        print(
            json.dumps(
                {
                    "cases": report.cases,
                    "seconds": round(report.seconds, 3),
                    "seed": args.seed,
                    "segments": len(segments),
                    "outcomes": dict(report.outcomes),
                    "mutations": dict(report.mutations),
                    "errorKinds": dict(report.reasons),
                    "crashes": report.crashes[: args.show],
                    "crashCount": len(report.crashes),
                }
            )
        )
    else:
        print(f"{report.cases} cases over {len(segments)} segments in {report.seconds:.1f} s (seed {args.seed})")
        for title, counter in [("outcome", report.outcomes), ("mutation", report.mutations), ("error", report.reasons)]:
            print(f"\n{title}:")
            for key, n in counter.most_common():
                print(f"  {n:8d}  {key}")
        for c in report.crashes[: args.show]:
            print(f"\ncrash: case {c['case']} ({c['segment']}, {c['mutation']}): {c['outcome']}: {c['error']}")
            print(f"  replay: python {sys.argv[0]} --seed {args.seed} --replay {c['case']}")
    return 1 if report.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
