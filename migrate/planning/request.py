"""What planning is asked and told: the operator's request, and each broker's survey for a cluster plan. The checks, the
planner and the cluster planner all read these; they import nothing of planning themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from migrate.compaction.rules import CompactionRule
from migrate.model.cluster_manifest import BrokerPart
from migrate.model.plan_tree import (
    DEFAULT_RANGE_BYTES,
    DEFAULT_TASK_BYTES,
    DEFAULT_TASK_SEGMENTS,
    ConvertOptions,
    ExchangeMethod,
    Plan,
    PlanForm,
)


@dataclass(frozen=True)
class PlanRequest:
    log_dirs: tuple[str, ...]
    options: ConvertOptions = field(default_factory=ConvertOptions)
    topics: str | None = None  # regex over topic names
    leader_epoch: int | None = None  # None: per partition, from its leader-epoch-checkpoint
    host_map: tuple[tuple[str, str], ...] = ()  # (log dir, host) pairs
    allow_unclean: bool = False
    check: bool = False  # plan --check: read every entry deeply before anything is touched
    task_bytes: int = DEFAULT_TASK_BYTES
    task_segments: int = DEFAULT_TASK_SEGMENTS
    free_bytes_cap: int | None = None  # tests and --assume-free-bytes: pretend the disk has at most this much free
    compact: tuple[CompactionRule, ...] = ()  # --compact: the first rule whose regex matches a topic applies to it
    drop_tombstones_older_than_ms: int | None = None  # --drop-tombstones-older-than (compacted partitions only)
    compact_memory_limit: int | None = None  # --compact-memory-limit: pass one's state per partition, at most
    range_bytes: int | None = DEFAULT_RANGE_BYTES  # --range-bytes: larger segments convert in ranges; None: never
    staging_dirs: tuple[tuple[str, str], ...] = ()  # (log dir, its --staging-dir); else each log dir's default tree
    use_staged: bool = True  # --no-staged: plan cold, reading every segment, whatever a pre-stage pass left
    reverify_staged: bool = False  # --reverify-staged: execute re-reads staged files against their digests
    form: PlanForm = PlanForm.JSON  # how the plan is written and its id made: -o *.parquet is columnar
    swap_method: ExchangeMethod | None = None  # --swap-method; None: by each log dir's filesystem

    def compaction_rule(self, topic: str) -> CompactionRule | None:
        return next((r for r in self.compact if r.matches(topic)), None)

    def staging_dir_of(self, raw: str, resolved: Path) -> str | None:
        given = dict(self.staging_dirs)
        return given.get(raw) or given.get(str(resolved))

    def host_of(self, raw: str, resolved: Path) -> str | None:
        hosts = dict(self.host_map)
        return hosts.get(raw) or hosts.get(str(resolved))


@dataclass(frozen=True)
class BrokerSurvey:
    """What one broker's worker found: its identity, and its own plan or why it refused to plan."""

    worker: str
    host: str
    broker_id: int | None
    cluster_id: str | None
    log_dirs: tuple[str, ...]
    plan: Plan | None = None
    refusal: str | None = None
    part: BrokerPart | None = None  # plan --manifest: the plan stayed on the broker; this says where
