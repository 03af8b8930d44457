"""The vocabulary of kafka-log-migrate: the plan, the options, the run's states and events, a task and its outcome.

Every layer imports these records; no layer hands another a dict to navigate by string keys. They are frozen
dataclasses and ``str`` enums, serialised to JSON by one strict codec (``migrate.codec``) that rejects unknown keys,
missing fields and wrong types with the path of the offending value, and that also generates the plan's JSON schema
(``python -m migrate.model > plans/plan.schema.json``; a test checks the file is current).

The plan tree::

    Plan
      options: ConvertOptions                   how every segment is converted (the same on every replica)
      log_dirs: LogDirPlan...                   one broker log dir: its host, broker id, filesystems
        partitions: PartitionPlan...            one topic-partition directory, its leader epoch
          segments: SegmentPlan...              one <base>.log with legacy data: size, mtime, inode, formats
      tasks: TaskPlan...                        groups of segments of one log dir, the unit an engine schedules

``plan_id`` is a hash of the plan's content (everything but the id itself, when and where it was made, and the free
space seen): an edited plan no longer matches its id and is refused; planning the same inputs with the same options
gives the same id, so a re-made plan resumes the state of a crashed run.

The run's state lives per log dir (``migrate.run.state``): a state per segment and per partition, and an event history.
A partition is migrated only when every planned segment of it is live in the new format; a log dir is migrated
only when every planned partition is.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import itertools
import json
import os
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from migrate.codec import enum_member, from_json, json_schema, to_json
from migrate.errors import ModelError
from migrate.kafka.names import parse_partition_dir_name, segment_name

PLAN_VERSION = 2
DEFAULT_INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes default
DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's max.message.bytes default: 1 MiB + 12 bytes of log overhead
MAX_SEGMENT_BYTES = 2**31 - 1  # FileRecords cannot open a larger .log
# read size: 1-2 MiB chunks converted and verified 204 MB in 0.36-0.39 s here against 0.58 s at 8 MiB (fewer
# fresh-page faults, a working set that stays in cache); an entry up to Kafka's default 1 MiB limit fits in one
DEFAULT_CHUNK_BYTES = 2 << 20
DEFAULT_TASK_BYTES = 64 << 20
DEFAULT_TASK_SEGMENTS = 256
DEFAULT_RANGE_BYTES = 64 << 20  # a segment larger than this is converted in ranges of about this size, in parallel
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


# field metadata: an optional field added to a record that plans already hold is left out of the JSON while it is
# None, so older plans load, dump and hash (plan_id) exactly as before
OMIT_IF_NONE: Mapping[str, Any] = types.MappingProxyType({"omit_if_none": True})


# --- options ---------------------------------------------------------------------------------------------------


class TimestampPolicy(str, enum.Enum):
    """Timestamps for v0 records, which have none of their own (v1 records always keep theirs)."""

    MTIME = "mtime"  # LogAppendTime at the segment file's mtime: the KIP-32/33 fallback retention already uses
    NONE = "none"  # CreateTime -1: exactly what Kafka 4's cleaner writes

    def __str__(self) -> str:
        return self.value


class Codec(str, enum.Enum):
    """A compression codec by its Kafka name."""

    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"

    def __str__(self) -> str:
        return self.value


class DigestAlgorithm(str, enum.Enum):
    """The record digest a run checks its outputs with. Both hash the same canonical serialisation of every record
    (the oracle's); SHA-256 equals what `oracle dump --summary` prints, so a run can be checked against Kafka."""

    SHA256 = "sha256"
    XXH3_128 = "xxh3-128"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ConvertOptions:
    """How a segment is converted; the same options give the same bytes on every replica."""

    target_magic: int = 2
    timestamps: TimestampPolicy = TimestampPolicy.MTIME
    partition_leader_epoch: int = 0  # the plan sets it per partition (PartitionPlan.leader_epoch)
    compression: Codec | None = None  # None keeps each wrapper's codec, as Kafka's cleaner does
    pack_bytes: int | None = None  # opt-in: group uncompressed legacy messages into v2 batches of up to N bytes
    tombstone_flag: bool = False  # KIP-87: bit 5 of the v2 record attributes on null-value records
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    truncate_tail: bool = False  # drop a torn last entry of a partition's last segment (listed in the plan)
    chunk_bytes: int = DEFAULT_CHUNK_BYTES  # read size: peak memory is about this plus the largest batch
    # the run's own checks use the fast digest; sha256 (what `oracle dump --summary` prints) on request
    digest: DigestAlgorithm = DigestAlgorithm.XXH3_128

    def __post_init__(self) -> None:
        # plain strings from callers and old plans become the enums, so equality and JSON stay exact
        for name, kind in (("timestamps", TimestampPolicy), ("digest", DigestAlgorithm)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                object.__setattr__(self, name, enum_member(kind, value, f"options.{name}"))
        if self.compression is not None and not isinstance(self.compression, Codec):
            object.__setattr__(self, "compression", enum_member(Codec, self.compression, "options.compression"))
        if self.target_magic not in (1, 2):
            raise ModelError(f"options.target_magic: must be 1 or 2, not {self.target_magic!r}")
        if self.compression == Codec.ZSTD and self.target_magic < 2:
            raise ModelError("options.compression: zstd needs target magic 2 (Kafka reads zstd only in v2 batches)")
        if self.pack_bytes is not None and (self.target_magic != 2 or self.pack_bytes < 1):
            raise ModelError("options.pack_bytes: needs target magic 2 and a positive size")
        if self.partition_leader_epoch < -1:
            raise ModelError(f"options.partition_leader_epoch: {self.partition_leader_epoch} is below -1")
        for name in ("index_interval_bytes", "max_message_bytes", "chunk_bytes"):
            if getattr(self, name) < 1:
                raise ModelError(f"options.{name}: must be positive, not {getattr(self, name)}")

    @property
    def one_batch_per_message(self) -> bool:
        """Each uncompressed legacy message becomes one uncompressed v2 batch, as Kafka 4's cleaner writes them: no
        --pack-bytes, no --compression, target v2. The plan then knows each batch's size from the message alone."""
        return self.target_magic == 2 and self.pack_bytes is None and self.compression in (None, Codec.NONE)

    def for_partition(self, leader_epoch: int) -> ConvertOptions:
        return dataclasses.replace(self, partition_leader_epoch=leader_epoch)


# --- the plan --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TailDrop:
    """A torn last entry that ``--truncate-tail`` drops from a partition's last segment (the original is kept until
    finalize). ``claimed_offset`` is the offset field of the partial entry's header when it was written."""

    position: int
    bytes: int
    last_kept_offset: int | None
    claimed_offset: int | None


@dataclass(frozen=True)
class RangeCut:
    """Where a range of a large segment starts: ``position``, an entry start the plan found walking the file from
    byte 0, and ``output_offset``, where that entry's converted bytes start in the joined segment. Known in advance
    when every entry's converted size is (an uncompressed legacy message becomes one v2 batch whose size follows
    from its key and value lengths alone; a v2 batch stays as it is), so each range writes straight into its place."""

    position: int
    output_offset: int


@dataclass(frozen=True)
class SegmentPlan:
    base_offset: int
    size: int
    mtime_ns: int
    inode: int
    entries_by_magic: dict[str, int]
    estimated_output_bytes: int
    tail_drop: TailDrop | None = None
    # a segment converted in ranges whose outputs' places are known: the first cut is (0, 0), the last (size, the
    # converted size); left out of the JSON when None
    range_cuts: tuple[RangeCut, ...] | None = field(default=None, metadata=OMIT_IF_NONE)

    @property
    def file(self) -> str:
        return segment_name(self.base_offset, ".log")


class CompactionStrategy(str, enum.Enum):
    """KIP-280: which record of a key survives compaction."""

    OFFSET = "offset"  # the highest offset (Kafka's own cleaner)
    TIMESTAMP = "timestamp"  # the highest timestamp, ties to the highest offset
    HEADER = "header"  # the highest big-endian 8-byte value of a named header, ties to the highest offset

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class CompactionPlan:
    """KIP-280 compaction of one partition during its migration (``plan --compact``): how, and what planning found
    it keeps. ``execute`` computes the survivors again and refuses the partition if they differ from these."""

    rule: str  # the --compact rule that chose this partition
    strategy: CompactionStrategy
    records: int
    distinct_keys: int
    records_kept: int
    bytes: int  # keys, values and headers of every record
    bytes_kept: int
    tombstones_kept: int
    tombstones_dropped: int
    pass_one_bytes: int  # pass one's state: distinct keys x bytes per key (KIP-280's estimate)
    survivors_sha256: str  # of the kept offsets in offset order, as big-endian int64s
    header: str = ""  # the header strategy's header name; blank falls back to offset (KIP-280)
    drop_tombstones_older_than_ms: int | None = None  # None: every tombstone that wins its key is kept
    memory_limit_bytes: int | None = None  # pass one refuses the partition beyond this

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, CompactionStrategy):
            object.__setattr__(self, "strategy", enum_member(CompactionStrategy, self.strategy, "compaction.strategy"))

    @property
    def effective_strategy(self) -> CompactionStrategy:
        """KIP-280: a header strategy without a header name (or a blank one) falls back to offset."""
        if self.strategy == CompactionStrategy.HEADER and not self.header.strip():
            return CompactionStrategy.OFFSET
        return self.strategy


@dataclass(frozen=True)
class PartitionPlan:
    name: str  # the topic-partition directory name
    topic: str
    partition: int
    dir: str
    dir_mtime_ns: int  # restored after a rollback (our work dir changes it)
    leader_epoch: int
    bytes: int
    estimated_output_bytes: int
    segments: tuple[SegmentPlan, ...]
    # plan --compact: left out of the JSON when None, so plans without compaction keep their bytes and ids
    compaction: CompactionPlan | None = field(default=None, metadata=OMIT_IF_NONE)

    @cached_property
    def segment_by_base(self) -> dict[int, SegmentPlan]:
        return {s.base_offset: s for s in self.segments}


@dataclass(frozen=True)
class FilesystemSpace:
    """Staging space on one filesystem: converted segments live beside the originals until finalize."""

    device: int
    example_dir: str
    partitions: int
    needed_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class LogDirPlan:
    """One log dir of one broker. ``key`` names it in the plan: its path on a one-host plan, ``broker-<id>:<path>`` on
    a cluster plan, where every broker may keep its data at the same path."""

    key: str
    log_dir: str  # the path on its host
    mtime_ns: int  # restored after a rollback (the fence and the state change it)
    host: str | None  # the Dask worker host that owns it; None: the machine that runs the command
    broker_id: int | None
    cluster_id: str | None
    partitions: tuple[PartitionPlan, ...]
    filesystems: tuple[FilesystemSpace, ...] = ()

    @property
    def label(self) -> str:
        """How messages name it: the path, with the broker on a cluster plan."""
        return self.log_dir if self.key == self.log_dir else f"broker {self.broker_id} {self.log_dir}"

    @cached_property
    def partition_by_name(self) -> dict[str, PartitionPlan]:
        return {p.name: p for p in self.partitions}

    def check_paths(self) -> None:
        """Every path the tool will write or delete under derives from these, so they are compared as paths, not as
        strings: an absolute, normalized log dir, and partition dirs that are exactly ``<log dir>/<name>`` with a
        name Kafka itself would load (a ``..``, ``.``, a slash or a sub-path would reach outside the log dir)."""
        if (
            not os.path.isabs(self.log_dir)
            or os.path.normpath(self.log_dir) != self.log_dir.rstrip("/")
            or (self.log_dir != "/" and self.log_dir.endswith("/"))
        ):
            raise ModelError(
                f"log dir {self.log_dir!r} is not an absolute, normalized path (no '..', '.', '//' or trailing '/'): "
                "re-plan with `kafka-log-migrate plan --log-dirs` and the broker's log.dirs"
            )
        for p in self.partitions:
            parsed = parse_partition_dir_name(p.name)
            if parsed is None or p.name in (".", "..") or p.dir != os.path.join(self.log_dir, p.name):
                raise ModelError(
                    f"partition {p.name!r}: its dir {p.dir!r} is not the topic-partition directory "
                    f"{os.path.join(self.log_dir, p.name)!r} of its log dir {self.log_dir!r}; "
                    "a plan is reviewed, not edited: re-plan with `kafka-log-migrate plan`"
                )


@dataclass(frozen=True)
class SegmentRef:
    partition: str
    base_offset: int


@dataclass(frozen=True)
class ByteRange:
    """One of ``count`` ranges of a segment too large for one worker (``plan --range-bytes``): its task converts the
    entries that start in ``[start, end)`` (to the end of the file for the last one); a join makes them one segment
    (``migrate.segment.ranges``). With ``output_start`` and ``output_end`` (the plan's ``RangeCut``s), ``start`` is
    an entry start and the range's converted bytes are exactly ``[output_start, output_end)`` of the joined segment."""

    index: int
    count: int
    start: int
    end: int
    output_start: int | None = field(default=None, metadata=OMIT_IF_NONE)
    output_end: int | None = field(default=None, metadata=OMIT_IF_NONE)

    @property
    def output(self) -> tuple[int, int] | None:
        if self.output_start is None or self.output_end is None:
            return None
        return self.output_start, self.output_end


@dataclass(frozen=True)
class TaskPlan:
    """Segments of one log dir converted and verified by one engine task: a task per tiny segment would drown the
    scheduler, so tasks hold up to --task-bytes and --task-segments. A task with ``byte_range`` converts one range
    of its one segment."""

    id: str
    log_dir: str  # the key of its LogDirPlan
    segments: tuple[SegmentRef, ...]
    bytes: int
    # left out of the JSON when None, so plans without ranges keep their bytes and ids
    byte_range: ByteRange | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True)
class Estimates:
    partitions: int
    segments: int
    bytes: int
    estimated_output_bytes: int


@dataclass(frozen=True)
class Plan:
    version: int
    plan_id: str
    tool: str
    created: str
    planned_on: str
    options: ConvertOptions
    log_dirs: tuple[LogDirPlan, ...]
    tasks: tuple[TaskPlan, ...]
    estimates: Estimates
    warnings: tuple[str, ...] = ()

    @cached_property
    def log_dir_by_key(self) -> dict[str, LogDirPlan]:
        return {d.key: d for d in self.log_dirs}

    def log_dir(self, key: str) -> LogDirPlan:
        """The log dir named ``key`` (its path on a one-host plan)."""
        try:
            return self.log_dir_by_key[key]
        except KeyError:
            raise ModelError(f"log dir {key} is not in plan {self.plan_id}") from None

    def brokers(self) -> list[int | None]:
        return sorted({d.broker_id for d in self.log_dirs}, key=lambda b: (b is None, b or 0))

    def partition(self, log_dir: str, name: str) -> PartitionPlan:
        try:
            return self.log_dir(log_dir).partition_by_name[name]
        except KeyError:
            raise ModelError(f"partition {name} of {log_dir} is not in plan {self.plan_id}") from None

    def tasks_of(self, key: str) -> list[TaskPlan]:
        return [t for t in self.tasks if t.log_dir == key]

    @cached_property
    def tasks_by_id(self) -> dict[str, TaskPlan]:
        return {t.id: t for t in self.tasks}

    def content_id(self) -> str:
        """The id the plan's content deserves: what ``plan_id`` must equal."""
        return content_id(self)

    def check_integrity(self) -> None:
        """Refuse a plan whose content no longer matches its id, or whose parts contradict each other."""
        if self.version != PLAN_VERSION:
            raise ModelError(f"plan version {self.version}; this kafka-log-migrate reads version {PLAN_VERSION}")
        if self.content_id() != self.plan_id:
            raise ModelError(
                f"plan {self.plan_id} was edited after it was made (its content hashes to {self.content_id()}). "
                "A plan is reviewed, not edited: re-plan with `kafka-log-migrate plan` and the options you want"
            )
        for d in self.log_dirs:
            d.check_paths()
        ranges: dict[tuple[str, str, int], list[ByteRange]] = {}
        for t in self.tasks:
            d = self.log_dir(t.log_dir)
            for ref in t.segments:
                part = d.partition_by_name.get(ref.partition)
                if part is None or ref.base_offset not in part.segment_by_base:
                    raise ModelError(f"task {t.id}: segment {ref.partition}/{ref.base_offset} is not in the plan")
            if t.byte_range is not None:
                if len(t.segments) != 1:
                    raise ModelError(f"task {t.id}: a range task converts one segment, not {len(t.segments)}")
                ref = t.segments[0]
                ranges.setdefault((t.log_dir, ref.partition, ref.base_offset), []).append(t.byte_range)
        for (key, name, base), found in ranges.items():
            found.sort(key=lambda r: r.index)
            size = self.partition(key, name).segment_by_base[base].size
            if (
                [r.index for r in found] != list(range(found[0].count))
                or any(r.count != found[0].count for r in found)
                or found[0].start != 0
                or found[-1].end != size
                or any(a.end != b.start or a.start >= a.end for a, b in itertools.pairwise(found))
            ):
                raise ModelError(f"segment {name}/{base}: its byte ranges do not cover 0..{size} in order")
            outputs = [r.output for r in found]
            if any(o is not None for o in outputs) and (
                any(o is None or o[0] > o[1] for o in outputs)
                or outputs[0][0] != 0  # type: ignore[index]
                or any(a[1] != b[0] for a, b in itertools.pairwise(outputs))  # type: ignore[index]
            ):
                raise ModelError(f"segment {name}/{base}: its byte ranges' outputs do not follow one another from 0")


_VOLATILE_PLAN_FIELDS = ("plan_id", "created", "planned_on")


def content_id(plan: Plan) -> str:
    body = to_json(plan)
    for name in _VOLATILE_PLAN_FIELDS:
        body.pop(name, None)
    for d in body["log_dirs"]:
        d["filesystems"] = [{k: v for k, v in fs.items() if k != "free_bytes"} for fs in d["filesystems"]]
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def load_plan_json(text: str, source: str = "plan") -> Plan:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(f"{source}: not JSON ({exc})") from exc
    if isinstance(data, dict) and data.get("version") != PLAN_VERSION:
        raise ModelError(
            f"{source}: plan version {data.get('version')!r}; this kafka-log-migrate reads version {PLAN_VERSION}. "
            "Re-plan with this version's `kafka-log-migrate plan`."
        )
    plan = from_json(Plan, data, "plan")
    plan.check_integrity()
    return plan


def dump_plan_json(plan: Plan) -> str:
    return json.dumps(to_json(plan), indent=1) + "\n"


# --- the run's state -------------------------------------------------------------------------------------------


class SegmentState(str, enum.Enum):
    PLANNED = "planned"
    VERIFIED = "verified"  # converted into staging and re-read from disk: ready to swap
    UNCHANGED = "unchanged"  # nothing to rewrite (already in the target format, or no entries): nothing to swap
    REFUSED = "refused"  # bad input or a Kafka limit: fails its partition only
    FAILED = "failed"  # the environment failed (disk full, I/O error, permission): the run stops
    SWAPPED = "swapped"
    ROLLED_BACK = "rolled-back"

    def __str__(self) -> str:
        return self.value


class PartitionState(str, enum.Enum):
    PLANNED = "planned"
    CONVERTING = "converting"  # some segments verified, others not yet
    READY = "ready"  # every segment verified: waiting for the swap
    FAILED = "failed"  # a segment was refused or failed, or a live file changed; the partition is untouched
    SWAPPING = "swapping"  # live files may be mixed: the fence must stay up
    MIGRATED = "migrated"
    ROLLING_BACK = "rolling-back"  # live files may be mixed: the fence must stay up
    ROLLED_BACK = "rolled-back"

    def __str__(self) -> str:
        return self.value

    @property
    def mixed(self) -> bool:
        """Live files may be partly old and partly new."""
        return self in (PartitionState.SWAPPING, PartitionState.ROLLING_BACK)


class LogDirPhase(str, enum.Enum):
    """Where a log dir's migration stands, as a whole."""

    NEW = "new"  # no run has touched it
    EXECUTING = "executing"  # started; not every partition migrated yet
    MIGRATED = "migrated"  # every planned partition migrated; originals kept for rollback
    ROLLING_BACK = "rolling-back"
    ROLLED_BACK = "rolled-back"
    FINALIZED = "finalized"  # originals deleted

    def __str__(self) -> str:
        return self.value


class EventKind(str, enum.Enum):
    """One line of a log dir's history (the ``events`` table)."""

    RUN_STARTED = "run-started"
    RUN_ENDED = "run-ended"
    PREPARED = "prepared"
    FENCE_UP = "fence-up"
    FENCE_DOWN = "fence-down"
    SEGMENT_VERIFIED = "segment-verified"
    SEGMENT_UNCHANGED = "segment-unchanged"
    SEGMENT_REFUSED = "segment-refused"
    SEGMENT_FAILED = "segment-failed"
    SWAP_BEGUN = "swap-begun"
    PARTITION_MIGRATED = "partition-migrated"
    PARTITION_FAILED = "partition-failed"
    ROLLBACK_BEGUN = "rollback-begun"
    PARTITION_ROLLED_BACK = "partition-rolled-back"
    ROLLED_BACK = "rolled-back"
    FINALIZED = "finalized"
    STATE_REBUILT = "state-rebuilt"  # the state database was missing or unusable: rebuilt from the files
    STATE_CORRECTED = "state-corrected"  # a partition's recorded state disagreed with its files: the files won

    def __str__(self) -> str:
        return self.value


class Stage(str, enum.Enum):
    """Every stage an engine runs, by the name its Dask task keys, the dashboard and Prometheus count it under.

    The dashboard and the collector walk this enum, so a stage added here is counted everywhere at once."""

    SURVEY = "survey"  # a broker's log dirs looked at for a cluster plan, on that broker
    PREPARE = "prepare"
    COMPACT = "compact"
    CONVERT = "convert"
    JOIN = "join"
    REPLICAS = "replicas"  # the swap refused where replicas diverged (--require-consistent-replicas)
    REPLICA_RANGES = "replica-ranges"
    REPLICA_DIGESTS = "replica-digests"
    SWAP = "swap"
    VERIFY = "verify"
    STATUS = "status"
    ROLLBACK_CHECK = "rollback-check"
    ROLLBACK = "rollback"
    ARCHIVE = "archive"
    FINALIZE = "finalize"
    FORGET = "forget"
    MTIME = "mtime"
    REPORT = "report"

    def __str__(self) -> str:
        return self.value


# --- a segment's conversion and its outcome --------------------------------------------------------------------


@dataclass(frozen=True)
class FileStat:
    """What identifies a live file: a broker writing to it changes size or mtime; a rename changes the inode."""

    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: Any) -> FileStat:
        return cls(int(st.st_ino), int(st.st_size), int(st.st_mtime_ns))


@dataclass(frozen=True)
class SegmentTask:
    """Convert one segment: the source, where its outputs go, and what the source must still be."""

    source: str  # path of <base>.log
    staging_dir: str  # where <base>.log/.index/.timeindex are written
    base_offset: int
    options: ConvertOptions = field(default_factory=ConvertOptions)
    expected_size: int | None = None  # refuse if the source changed since planning
    expected_mtime_ns: int | None = None
    expected_inode: int | None = None
    tail_drop: TailDrop | None = None  # the only tail the plan allows to be dropped
    survivors: str | None = None  # compacted partition: .npy of the offsets to keep (migrate.stages.compact)


class ConversionStatus(str, enum.Enum):
    CONVERTED = "converted"
    UNCHANGED = "unchanged"  # already in the target format: nothing written
    EMPTY = "empty"  # no complete entry

    def __str__(self) -> str:
        return self.value


@dataclass
class SegmentResult:
    """What converting one segment produced: staged files and the digests the verifier must find again."""

    source: str
    base_offset: int
    status: ConversionStatus
    outputs: dict[str, str] = field(default_factory=dict)  # suffix -> staged path
    output_stats: dict[str, FileStat] = field(default_factory=dict)
    live_before: dict[str, FileStat] = field(default_factory=dict)  # the live files this output will replace
    source_bytes: int = 0
    output_bytes: int = 0
    entries_in: int = 0
    batches_out: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    max_timestamp: int = -1
    magics_in: dict[str, int] = field(default_factory=dict)
    mtime_timestamped_records: int = 0  # v0 records that received the segment's mtime (--timestamps mtime)
    digest: DigestAlgorithm = DigestAlgorithm.SHA256
    source_digest: str = ""  # offsets, keys, values, headers: must survive any conversion
    output_digest_ts: str = ""  # the same plus the timestamps the output must read back as
    # converted in ranges: the first offset of every range after the first; both digests are then composite (the
    # digest of the ranges' digests, migrate.format.digest), so a reader cuts the records at these offsets
    digest_splits: tuple[int, ...] = ()
    mtime_ns: int = 0
    truncated_tail_bytes: int = 0
    seconds: float = 0.0
    records_dropped: int = 0  # compaction: source records left out (their offsets become gaps); ``records`` kept
    # the source as it was read (migrate.segment.identity): the swap renames nothing over a source whose ctime or edges
    # changed since, though its size, mtime and inode did not (a same-size rewrite)
    source_ctime_ns: int = 0
    source_edges: str = ""

    @property
    def output_sizes(self) -> dict[str, int]:
        return {sfx: st.size for sfx, st in self.output_stats.items()}


@dataclass(frozen=True)
class Problem:
    """Why a segment or a partition did not migrate: what, where and what to do."""

    kind: str  # LocatedError.kind ("corrupt", "refused", ...), "io-error", "verify", "live-changed", "bug"
    message: str
    path: str | None = None
    position: int | None = None
    offset: int | None = None

    @classmethod
    def of(cls, exc: BaseException) -> Problem:
        from migrate.errors import LocatedError

        if isinstance(exc, LocatedError):
            return cls(exc.kind, str(exc), exc.path, exc.position, exc.offset)
        if isinstance(exc, OSError):
            return cls("io-error", _os_error_text(exc), exc.filename)
        return cls("bug", f"{type(exc).__name__}: {exc}")


def _os_error_text(exc: OSError) -> str:
    import errno

    what = exc.strerror or str(exc)
    where = f" on {exc.filename}" if exc.filename else ""
    advice = {
        errno.ENOSPC: "Free space on that filesystem, then run `execute` again to resume (or `rollback`).",
        errno.EDQUOT: "Raise the quota or free space, then run `execute` again to resume (or `rollback`).",
        errno.EIO: "The disk reported an I/O error: check it (dmesg, SMART) before anything else.",
        errno.EPERM: "The file or directory refuses changes (immutable attribute? run `lsattr`); fix that, then run "
        "`execute` again to resume (or `rollback`).",
        errno.EACCES: "Run kafka-log-migrate as the user that owns the log dir (the broker's user) or as root.",
        errno.EROFS: "The filesystem is read-only: remount it read-write, then run `execute` again.",
    }.get(exc.errno or 0, "Fix the cause, then run `execute` again to resume (or `rollback`).")
    return f"{what}{where}. {advice}"


class Outcome(str, enum.Enum):
    VERIFIED = "verified"
    UNCHANGED = "unchanged"
    REFUSED = "refused"
    FAILED = "failed"
    SKIPPED = "skipped"  # done already (resumed), or not attempted after its partition failed or the run stopped

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SegmentOutcome:
    """What a convert task did with one segment: the record a task returns, the state store keeps and progress
    reports carry."""

    log_dir: str
    partition: str
    base_offset: int
    outcome: Outcome
    source_bytes: int = 0
    output_bytes: int = 0
    records: int = 0
    convert_seconds: float = 0.0
    verify_seconds: float = 0.0
    problem: Problem | None = None
    result: SegmentResult | None = None
    finished_at: float = 0.0


@dataclass(frozen=True)
class RangeProgress:
    """A range of a large segment converted and verified by its own task: progress only, the bytes of the source
    range it covers. The segment's outcome, the one the state keeps, comes with its join."""

    log_dir: str
    partition: str
    base_offset: int
    index: int
    count: int
    source_bytes: int


@dataclass(frozen=True)
class PartitionStatus:
    log_dir: str
    partition: str
    state: PartitionState
    segments: dict[str, int]  # segment state -> count
    problem: Problem | None = None
    updated_at: float = 0.0


@dataclass(frozen=True)
class LogDirStatus:
    log_dir: str
    phase: LogDirPhase
    fence_up: bool
    partitions: tuple[PartitionStatus, ...]
    history: tuple[str, ...] = ()  # "finalized at ..., N partitions migrated"
    # where the files say otherwise than the state database (status changes nothing: the next execute or rollback
    # corrects the state), and the run holding the state now, if any ("execute, pid 123 on host h, since ...")
    reconciled: tuple[str, ...] = ()
    running: str | None = None

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.partitions:
            out[p.state.value] = out.get(p.state.value, 0) + 1
        return out

    @property
    def unmigrated(self) -> list[PartitionStatus]:
        return [p for p in self.partitions if p.state != PartitionState.MIGRATED]


# --- the plan's JSON schema -----------------------------------------------------------------------------------

PLAN_SCHEMA_TITLE = "kafka-log-migrate plan"
PLAN_SCHEMA_DESCRIPTION = (
    "Written by `kafka-log-migrate plan`; read by execute, verify, status, rollback and finalize. Generated from "
    "migrate/model.py (python -m migrate.model). plan_id hashes the content without plan_id, created, planned_on "
    "and free_bytes; an edited plan is refused."
)


def plan_schema() -> dict[str, Any]:
    return json_schema(Plan, PLAN_SCHEMA_TITLE, PLAN_SCHEMA_DESCRIPTION)


# --- what each stage reports -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrepareReport:
    log_dir: str
    phase: LogDirPhase
    resumed: bool
    reset_segments: int = 0  # failed, refused or lost-staging segments planned again
    restored_partitions: int = 0  # partitions a crashed rollback had begun, finished before migrating again
    reconciled: tuple[str, ...] = ()  # what the state said that the files did not: corrected from the files
    changed: tuple[str, ...] = ()  # live files that are neither the originals nor the outputs swapped in


@dataclass
class RangePart:
    """One range of a segment, converted and verified by its own task: where its entries are, its part file, and
    what the join needs. ``outcome`` VERIFIED: usable; REFUSED/FAILED with ``problem``; SKIPPED: not attempted."""

    index: int
    count: int
    nominal_start: int
    nominal_end: int
    log_dir: str = ""
    partition: str = ""
    outcome: Outcome = Outcome.VERIFIED
    problem: Problem | None = None
    start: int | None = None  # where its first entry starts; None: no entry start found near its nominal start
    stop: int = 0  # file position after its last entry: the next range must start exactly here
    at_end: bool = False  # it read to the end of the file (its last complete entry, and a listed tail)
    changed: bool = False  # some entry was rewritten
    result: SegmentResult | None = None  # of this range alone; outputs[".log"] is the part file
    batches: str = ""  # its batches' (size, last offset, max timestamp) as native int64 triples
    head: bytes = b""  # the part file's first 12 bytes (offset and size of its first batch)
    convert_seconds: float = 0.0
    verify_seconds: float = 0.0
    files: list[str] = field(default_factory=list)  # everything it wrote, for cleanup
    output: tuple[int, int] | None = None  # its place in the joined file, when the plan knew it (ByteRange.output)
    in_place: bool = False  # its converted bytes are at ``output`` in the joined file, exactly as the plan said


@dataclass(frozen=True)
class ConvertTaskResult:
    """What a convert task returns, and a join: the outcomes of the segments it recorded in the state store; or, for
    a task that converted one range of a large segment (``range_part``), no outcome: its segment's join records it."""

    outcomes: tuple[SegmentOutcome, ...] = ()
    range_part: RangePart | None = None


@dataclass(frozen=True)
class PartitionProblem:
    partition: str
    problem: Problem


@dataclass(frozen=True)
class SwapReport:
    log_dir: str
    migrated: tuple[str, ...]  # partitions migrated by this call
    failed: tuple[PartitionProblem, ...]  # partitions left untouched (a live file changed, a file refused a link)
    mixed: tuple[str, ...]  # partitions whose live files may be mixed: the fence stays up
    fence_up: bool
    stopped: Problem | None = None  # an error that stopped the stage


@dataclass(frozen=True)
class RollbackReport:
    log_dir: str
    phase: LogDirPhase
    restored: tuple[str, ...]  # partitions whose originals were put back by this call
    changed: tuple[str, ...] = ()  # live files changed after the swap (refused without --force)
    forced: bool = False
    reconciled: tuple[str, ...] = ()


@dataclass(frozen=True)
class FinalizeReport:
    log_dir: str
    phase: LogDirPhase
    finalized: tuple[str, ...]  # partitions whose originals were deleted
    left_legacy: tuple[str, ...] = ()  # --partial: partitions left as they were (not migrated)
    reconciled: tuple[str, ...] = ()


@dataclass(frozen=True)
class LiveCheck:
    """``verify``: the live files of migrated partitions re-read and checked against what was swapped in."""

    log_dir: str
    phase: LogDirPhase
    checked_segments: int
    problems: tuple[str, ...]
    unmigrated: tuple[str, ...]
    history: tuple[str, ...] = ()  # the log dir's milestones ("... finalized migrated=12"), also after finalize


# --- replicas of one partition on several brokers (migrate.stages.replicas) ---


@dataclass(frozen=True)
class ReplicaRange:
    """The offsets one broker's replica of a partition holds (phase one: a shallow read of its first and last
    segments)."""

    broker_id: int | None
    partition: str
    first_offset: int | None
    last_offset: int | None


@dataclass(frozen=True)
class ReplicaDigest:
    """One broker's digests of one partition over the range all its replicas hold (phase two)."""

    broker_id: int | None
    partition: str
    first_offset: int
    last_offset: int
    bucket_offsets: int
    buckets: tuple[str, ...]  # digest of bucket k: offsets [first + k*B, first + (k+1)*B) within the range


@dataclass(frozen=True)
class Divergence:
    partition: str
    brokers: tuple[int | None, ...]
    first_offset: int  # the first differing offset range: [first_offset, last_offset]
    last_offset: int
    digests: dict[str, str]  # broker id (as text) -> that range's digest


# --- what a command reports ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageError:
    """A stage call that could not run at all (a log dir on another host, a refused prepare, a full disk)."""

    stage: Stage
    log_dir: str
    message: str
    error_type: str = ""


@dataclass(frozen=True)
class SegmentTotals:
    verified: int = 0  # converted and verified by this run
    unchanged: int = 0
    refused: int = 0
    failed: int = 0
    skipped: int = 0  # done by an earlier run, or not attempted
    bytes_in: int = 0
    bytes_out: int = 0
    records: int = 0
    convert_seconds: float = 0.0
    verify_seconds: float = 0.0

    @classmethod
    def of(cls, outcomes: list[SegmentOutcome]) -> SegmentTotals:
        done = [o for o in outcomes if o.outcome in (Outcome.VERIFIED, Outcome.UNCHANGED)]
        count = {k: sum(1 for o in outcomes if o.outcome == k) for k in Outcome}
        return cls(
            verified=count[Outcome.VERIFIED],
            unchanged=count[Outcome.UNCHANGED],
            refused=count[Outcome.REFUSED],
            failed=count[Outcome.FAILED],
            skipped=count[Outcome.SKIPPED],
            bytes_in=sum(o.source_bytes for o in done),
            bytes_out=sum(o.output_bytes for o in done),
            records=sum(o.records for o in done),
            convert_seconds=round(sum(o.convert_seconds for o in outcomes), 3),
            verify_seconds=round(sum(o.verify_seconds for o in outcomes), 3),
        )


@dataclass(frozen=True)
class ExecuteReport:
    plan_id: str
    engine: str
    ok: bool  # every planned partition of every log dir is migrated
    totals: SegmentTotals
    log_dirs: tuple[LogDirStatus, ...]
    errors: tuple[StageError, ...] = ()
    stage_seconds: dict[str, float] = field(default_factory=dict)
    problems: tuple[SegmentOutcome, ...] = ()  # refused and failed segments of this run
    accelerator: str = ""  # the C accelerator's state: "active", or why the slow path runs
    divergent_replicas: tuple[Divergence, ...] = ()  # replicas of one partition whose records differ across brokers
    reconciled: tuple[str, ...] = ()  # where the state database disagreed with the files, and was corrected

    @property
    def unmigrated(self) -> list[PartitionStatus]:
        return [p for d in self.log_dirs for p in d.unmigrated]


@dataclass(frozen=True)
class LeaveReport:
    """rollback or finalize: what each log dir ended as, and where its state was archived."""

    verb: str
    ok: bool
    rollbacks: tuple[RollbackReport, ...] = ()
    finalizes: tuple[FinalizeReport, ...] = ()
    errors: tuple[StageError, ...] = ()
    archived: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()  # live files changed after the swap: nothing was rolled back


@dataclass(frozen=True)
class StatusReport:
    plan_id: str
    log_dirs: tuple[LogDirStatus, ...]
    not_started: tuple[str, ...] = ()  # log dirs with no state of this plan (never executed)
    errors: tuple[StageError, ...] = ()

    def every_planned_partition_migrated(self, plan: Plan) -> bool:
        """Judged against the plan, not against whatever the states happen to list."""
        migrated = {
            (d.log_dir, p.partition) for d in self.log_dirs for p in d.partitions if p.state == PartitionState.MIGRATED
        }
        return all((d.key, p.name) in migrated for d in plan.log_dirs for p in d.partitions)


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    log_dirs: tuple[LiveCheck, ...]
    errors: tuple[StageError, ...] = ()


if __name__ == "__main__":
    print(json.dumps(plan_schema(), indent=2))
