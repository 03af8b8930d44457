"""The plan tree and its options: what a plan holds, how it is checked, hashed and written as JSON."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import itertools
import json
import os
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from migrate.codec import enum_member, from_json, json_schema, to_json
from migrate.errors import ModelError, PlannedElsewhereError
from migrate.kafka.names import FileKind, is_partition_dir_name, segment_name

PLAN_VERSION = 2
DEFAULT_INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes default
DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's max.message.bytes default: 1 MiB + 12 bytes of log overhead
MAX_SEGMENT_BYTES = 2**31 - 1  # FileRecords cannot open a larger .log
# read size: 1-2 MiB chunks converted and verified 204 MB in 0.36-0.39 s here against 0.58 s at 8 MiB (fewer
# fresh-page faults, a working set that stays in cache); an entry up to Kafka's default 1 MiB limit fits in one
DEFAULT_CHUNK_BYTES = 2 << 20
DEFAULT_TASK_BYTES = 64 << 20
# each task costs the engine about 3 ms of the driver's CPU (its scheduler and client, which share the GIL with the
# driver's own conversions) and 2 ms of a worker's event loop: at 256 tiny segments a task that was 8% of the work,
# at 1024 2% (10^5 segments: the convert stage 13.4-16.1 s against 15.8-18.7, benchmarks/bench_million.py); 4096
# left a core idle at the start and the end of the stage. A log dir of fewer segments
# keeps tasks of 256, or smaller ones of at least 32 tasks: its tasks must still spread over the workers
DEFAULT_TASK_SEGMENTS = 1024
SMALL_TASK_SEGMENTS = 256
MIN_TASKS_PER_LOG_DIR = 32
DEFAULT_RANGE_BYTES = 64 << 20  # a segment larger than this is converted in ranges of about this size, in parallel
# the files a conversion writes for a segment: never a .txnindex (legacy formats hold no transactions)
CONVERTED_FILES = (FileKind.LOG, FileKind.INDEX, FileKind.TIME_INDEX)


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


class PlanForm(str, enum.Enum):
    """How a plan is written and how its id hashes its content (``migrate.model.plan_columns``)."""

    JSON = "json"  # one JSON document: small plans, read and diffed by people
    COLUMNAR = "columnar"  # a Parquet file of one row per segment: a broker's million segments

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
    # like a topic's segment.bytes: a source whose conversion exceeds it becomes several segments cut at batch
    # boundaries (None: Kafka's ceiling, MAX_SEGMENT_BYTES); left out of the JSON when None, so plan ids stay
    max_segment_bytes: int | None = field(default=None, metadata=OMIT_IF_NONE)

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
        if self.max_segment_bytes is not None:
            if not 1 <= self.max_segment_bytes <= MAX_SEGMENT_BYTES:
                raise ModelError(
                    f"options.max_segment_bytes: {self.max_segment_bytes} is not in 1..{MAX_SEGMENT_BYTES} (Kafka "
                    "opens no larger .log)"
                )
            if not self.one_batch_per_message:
                raise ModelError(
                    "options.max_segment_bytes: segments are split at batch boundaries under Kafka's rules only; "
                    "drop --pack-bytes and --compression, or drop --max-segment-bytes"
                )

    @property
    def segment_bytes_limit(self) -> int:
        """The largest converted .log: ``max_segment_bytes``, else the largest Kafka opens."""
        return MAX_SEGMENT_BYTES if self.max_segment_bytes is None else self.max_segment_bytes

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
class SplitCut:
    """Where one output of a split source starts, after the first: ``position``, the source byte position of the entry
    whose batch opens it, and ``base_offset``, that batch's base offset, which names the output file."""

    position: int
    base_offset: int


@dataclass(frozen=True)
class SegmentSplit:
    """A source whose converted form exceeds the segment size limit (``ConvertOptions.segment_bytes_limit``) becomes
    ``outputs`` segments cut at batch boundaries, as Kafka's ``LocalLog.splitOverflowedSegment`` writes them: a batch
    goes into the current output while it fits, else opens the next, named after its base offset. The rule reads
    only the source's bytes and the options, so replicas cut alike. ``cuts``: where the second and later outputs
    start, when every entry's converted size is known before conversion; None where the source holds compressed
    wrappers (recompressed: only conversion knows their size) or is compacted, ``outputs`` then an estimate."""

    outputs: int
    cuts: tuple[SplitCut, ...] | None = None


@dataclass(frozen=True)
class SegmentPlan:
    base_offset: int
    size: int
    mtime_ns: int
    inode: int
    entries_by_magic: dict[int, int]  # by magic byte; the JSON spells the keys "0", "1", "2"
    estimated_output_bytes: int
    tail_drop: TailDrop | None = None
    # a segment converted in ranges whose outputs' places are known: the first cut is (0, 0), the last (size, the
    # converted size); left out of the JSON when None
    range_cuts: tuple[RangeCut, ...] | None = field(default=None, metadata=OMIT_IF_NONE)
    # a pre-stage pass converted this segment and its source is provably the file it read (migrate.prestage.cutover):
    # execute takes the staged outputs instead of converting; left out of the JSON when None (nothing staged)
    staged: bool | None = field(default=None, metadata=OMIT_IF_NONE)
    # the head of the sha256 of the pre-stage record planned from (hex): execute takes no record edited since
    staged_record: str | None = field(default=None, metadata=OMIT_IF_NONE)
    # a source converted into several segments (never in ranges); left out of the JSON when None
    split: SegmentSplit | None = field(default=None, metadata=OMIT_IF_NONE)

    @property
    def file(self) -> str:
        return segment_name(self.base_offset, FileKind.LOG)


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
    # a tuple, or a columnar plan's rows read from its columns on access (``SegmentRows``)
    segments: Sequence[SegmentPlan]
    # plan --compact: left out of the JSON when None, so plans without compaction keep their bytes and ids
    compaction: CompactionPlan | None = field(default=None, metadata=OMIT_IF_NONE)

    @cached_property
    def segment_by_base(self) -> Mapping[int, SegmentPlan]:
        # a columnar plan's segments are found by base offset in its columns, never held as records
        by_base = getattr(self.segments, "by_base", None)
        return by_base() if by_base is not None else {s.base_offset: s for s in self.segments}

    def sizes_by_base(self) -> dict[int, int]:
        """Each segment's planned size by base offset (a columnar plan's from its columns, no record per segment)."""
        sizes = getattr(self.segments, "sizes_by_base", None)
        return sizes() if sizes is not None else {s.base_offset: s.size for s in self.segments}

    def identities(self) -> list[tuple[int, int, int, int]]:
        """(base offset, size, mtime_ns, inode) of each segment as planned, in order (a columnar plan's from its
        columns: prepare asks for every segment of a log dir, 10^6 records it need not build)."""
        of = getattr(self.segments, "identities", None)
        return of() if of is not None else [(s.base_offset, s.size, s.mtime_ns, s.inode) for s in self.segments]

    @cached_property
    def staged_bases(self) -> frozenset[int]:
        """The base offsets of the segments planned from a pre-stage pass (a columnar plan's from its columns)."""
        of = getattr(self.segments, "staged_bases", None)
        return of() if of is not None else frozenset(s.base_offset for s in self.segments if s.staged)


@dataclass(frozen=True)
class FilesystemSpace:
    """Staging space on one filesystem: converted segments live beside the originals until finalize."""

    device: int
    example_dir: str
    partitions: int
    needed_bytes: int
    free_bytes: int


class ExchangeMethod(str, enum.Enum):
    """How a log dir's partitions change directory (``migrate.run.exchange``): one atomic ``renameat2`` exchange,
    or, where the filesystem cannot, two renames under the fence."""

    EXCHANGE = "exchange"
    RENAMES = "renames"

    def __str__(self) -> str:
        return self.value


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
    partitions: Sequence[PartitionPlan]  # a tuple, or a columnar plan's ``PartitionRows``
    filesystems: tuple[FilesystemSpace, ...] = ()
    # where this log dir's pre-staged conversions are (a cut-over plan); None: nothing staged was found
    staging_dir: str | None = field(default=None, metadata=OMIT_IF_NONE)
    # the clean-shutdown marker's mtime when planned: when the broker stopped, the start of the cut-over's window
    stopped_at_ns: int | None = field(default=None, metadata=OMIT_IF_NONE)
    # plan --reverify-staged: execute re-reads each staged file against its digests before taking it (a full read)
    reverify_staged: bool | None = field(default=None, metadata=OMIT_IF_NONE)
    # how its partitions change directory: what its filesystem is expected to do (execute tries, and says so where
    # the exchange is refused after all)
    swap_method: ExchangeMethod = ExchangeMethod.EXCHANGE

    @property
    def label(self) -> str:
        """How messages name it: the path, with the broker on a cluster plan."""
        return self.log_dir if self.key == self.log_dir else f"broker {self.broker_id} {self.log_dir}"

    @cached_property
    def partition_by_name(self) -> Mapping[str, PartitionPlan]:
        # a columnar plan's partitions are found by name in its columns, never held as records
        by_name = getattr(self.partitions, "by_name", None)
        return by_name() if by_name is not None else {p.name: p for p in self.partitions}

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
        prefix = os.path.join(self.log_dir, "")  # a name is one path component: join is this concatenation
        for p in self.partitions:
            if not is_partition_dir_name(p.name) or p.name in (".", "..") or "/" in p.name or p.dir != prefix + p.name:
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
    segments: Sequence[SegmentRef]  # a tuple, or a columnar plan's ``TaskRows``
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
    # the form whose scheme made plan_id; None: JSON. A columnar plan dumped as JSON for review keeps its id
    form: PlanForm | None = field(default=None, metadata=OMIT_IF_NONE)

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
        """The id the plan's content deserves under the JSON form's scheme: what ``plan_id`` must equal."""
        return content_id(self)

    def refuse_if_planned_elsewhere(self, here: str) -> None:
        """A plan of log dirs read where it was made (none pinned to a worker's host) is executed on that host only:
        it describes the files that host saw (their inodes, sizes, mtimes, first and last bytes), and the same paths
        on another host are other files. A cluster plan's log dirs are pinned: each runs on its broker's worker,
        which checks its broker's identity itself."""
        if any(d.host for d in self.log_dirs) or self.planned_on == here:
            return
        raise PlannedElsewhereError(
            f"plan {self.plan_id} was made on host {self.planned_on}, from the files it saw in "
            f"{', '.join(d.log_dir for d in self.log_dirs)}; this host is {here}, where the same paths are other "
            "files. "
            f"Run execute on {self.planned_on}, or make a plan here: kafka-log-migrate plan --log-dirs "
            f"{','.join(d.log_dir for d in self.log_dirs)} -o PLAN"
        )

    def check_integrity(self, id_of: Callable[..., str] | None = None) -> None:
        """Refuse a plan whose content no longer matches its id (``id_of``: the id scheme of the plan's form, the
        JSON form's by default), or whose parts contradict each other."""
        if self.version != PLAN_VERSION:
            raise ModelError(f"plan version {self.version}; this kafka-log-migrate reads version {PLAN_VERSION}")
        scheme = id_of or content_id
        deserved = scheme(self)
        # a plan written before the host that planned it was part of its id still loads (a run it began can be
        # finished): its id is checked over the rest, and execute still compares that host with its own
        if deserved != self.plan_id and scheme(self, seal_host=False) != self.plan_id:
            raise ModelError(
                f"plan {self.plan_id} was edited after it was made (its content, the host that planned it included, "
                f"hashes to {deserved}). A plan is reviewed, not edited: re-plan with `kafka-log-migrate plan` and the "
                "options you want"
            )
        for d in self.log_dirs:
            d.check_paths()
        # a columnar plan's tasks hold rows of its own segment table: they are in the plan by construction
        columnar = self.form == PlanForm.COLUMNAR
        ranges: dict[tuple[str, str, int], list[ByteRange]] = {}
        for t in self.tasks:
            d = self.log_dir(t.log_dir)
            for ref in () if columnar and t.byte_range is None else t.segments:
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


# not part of a plan's id: the id itself and when it was written. The host that planned (``planned_on``) is: a plan
# describes the files that host saw, and execute refuses to run it on another's (``Plan.refuse_if_planned_elsewhere``)
_VOLATILE_PLAN_FIELDS = ("plan_id", "created")


def content_id(plan: Plan, seal_host: bool = True) -> str:
    """The JSON form's id scheme; a columnar plan's is ``migrate.model.plan_columns.plan_id_of``. ``seal_host``
    False: the scheme of plans written before ``planned_on`` was part of the id."""
    if plan.form == PlanForm.COLUMNAR:
        raise ModelError("a columnar plan's id is made by migrate.model.plan_columns.plan_id_of")
    body = to_json(plan)
    for name in (*_VOLATILE_PLAN_FIELDS, *(() if seal_host else ("planned_on",))):
        body.pop(name, None)
    for d in body["log_dirs"]:
        d["filesystems"] = [{k: v for k, v in fs.items() if k != "free_bytes"} for fs in d["filesystems"]]
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def load_plan_json(text: str, source: str = "plan", id_of: Callable[..., str] | None = None) -> Plan:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(
            f"{source}: not JSON ({exc}): the file is cut short or was edited; write it again with "
            "`kafka-log-migrate plan`"
        ) from exc
    if isinstance(data, dict) and data.get("version") != PLAN_VERSION:
        raise ModelError(
            f"{source}: plan version {data.get('version')!r}; this kafka-log-migrate reads version {PLAN_VERSION}. "
            "Re-plan with this version's `kafka-log-migrate plan`."
        )
    plan = from_json(Plan, data, "plan")
    plan.check_integrity(id_of)
    return plan


def dump_plan_json(plan: Plan) -> str:
    return json.dumps(to_json(plan), indent=1) + "\n"


# --- the plan's JSON schema -----------------------------------------------------------------------------------

PLAN_SCHEMA_TITLE = "kafka-log-migrate plan"
PLAN_SCHEMA_DESCRIPTION = (
    "Written by `kafka-log-migrate plan`; read by execute, verify, status, rollback and finalize. Generated from "
    "migrate/model/plan_tree.py (python -m migrate.model). plan_id hashes the content without plan_id, created "
    "and free_bytes (planned_on, the host that planned, is in it); an edited plan is refused."
)


def plan_schema() -> dict[str, Any]:
    return json_schema(Plan, PLAN_SCHEMA_TITLE, PLAN_SCHEMA_DESCRIPTION)
