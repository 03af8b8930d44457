"""May this broker be stopped now? The gate a rolling cut-over passes before each broker.

A broker may be stopped only when the cluster can lose it without losing availability or durability:

- no partition is under-replicated (an in-sync set smaller than its replica set: stopping another replica of it
  could leave its only in-sync copy on one broker, or none) and none is offline (no leader);
- no partition that this broker holds in sync would fall below its ``min.insync.replicas`` once it stops (then
  ``acks=all`` producers fail for the whole window; Strimzi's roller refuses exactly this). The value is the
  topic's own config where the topic sets one, else the broker's default;
- no partition reassignment is in flight (a replica being added copies the leader's format, so which brokers end up
  converted would depend on who led; online-prestage-facts.md §5).

Before the first broker is stopped, ``judge_formats`` asks the same snapshot whether every broker writes v2 and will
keep doing so: a leader at ``inter.broker.protocol.version`` below 3.0 writes the message format its
``log.message.format.version`` (or a topic's ``message.format.version``) names, and its followers copy the batches as
they are, so converted brokers would gain v0/v1 data again. From 3.0 on both format settings are ignored (KIP-724) and
every batch written is v2; Kafka 4 has neither setting.

``judge`` is the decision: a pure function of a ``ClusterSnapshot`` (built from Kafka's Admin API responses by
``kafka_admin.snapshot_from``), returning a ``GateVerdict`` whose reasons name the topic, partition and brokers.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field


class ReasonKind(str, enum.Enum):
    UNDER_REPLICATED = "under-replicated"
    OFFLINE = "offline"  # no leader
    BELOW_MIN_ISR = "below-min-insync-replicas"  # what stopping this broker would do
    REASSIGNING = "reassignment-in-flight"
    BROKER_NOT_LIVE = "broker-not-live"
    METADATA_ERROR = "metadata-error"  # Kafka answered with an error for a topic or partition
    GATE_UNAVAILABLE = "gate-unavailable"  # the gate could not ask (Kafka unreachable, the command failed to run)
    NODE_NOT_READY = "node-not-ready"  # Kafka answered, but a broker it named was stopping or starting
    WRITES_LEGACY = "writes-legacy-format"  # a broker or topic whose leaders write (or may write) v0/v1 batches
    COMMAND_SAID_NO = "gate-command-no-go"


@dataclass(frozen=True)
class GateReason:
    kind: ReasonKind
    message: str  # for the operator: what, where (topic, partition, brokers) and what to wait for
    topic: str = ""
    partition: int | None = None
    brokers: tuple[int, ...] = ()


@dataclass(frozen=True)
class GateVerdict:
    broker: int  # -1: a verdict on the whole cluster (the write-format check)
    go: bool
    source: str  # which gate: "kafka-admin bootstrap=...", "command: ..."
    reasons: tuple[GateReason, ...] = ()
    output: str = ""  # what a gate command printed

    def summary(self) -> str:
        subject = f"broker {self.broker}" if self.broker >= 0 else "the brokers' write format"
        head = f"gate ({self.source}) for {subject}: {'GO' if self.go else 'NO GO'}"
        lines = [head] + [f"  {r.message}" for r in self.reasons[:20]]
        if len(self.reasons) > 20:
            lines.append(f"  ... and {len(self.reasons) - 20} more")
        lines += [f"  | {line}" for line in self.output.splitlines()[-20:]]
        return "\n".join(lines)


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True)
class Reassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True)
class BrokerFormat:
    """A broker's settings that decide the message format its leaders write, as DescribeConfigs reports them; None
    where the broker has no such setting (Kafka 4 dropped both: it writes v2 only)."""

    broker: int
    inter_broker_protocol: str | None
    log_message_format: str | None


@dataclass(frozen=True)
class ClusterSnapshot:
    """What the gate decides on: one look at the cluster through its Admin API."""

    live_brokers: tuple[int, ...]
    partitions: tuple[PartitionState, ...]
    reassignments: tuple[Reassignment, ...]
    default_min_insync: int  # the broker's min.insync.replicas (Kafka's default is 1)
    topic_min_insync: dict[str, int] = field(default_factory=dict)  # topics that set their own
    topic_errors: dict[str, int] = field(default_factory=dict)  # topic -> Kafka error code
    broker_formats: tuple[BrokerFormat, ...] = ()
    topic_formats: dict[str, str] = field(default_factory=dict)  # message.format.version set on the topic itself

    def min_insync(self, topic: str) -> tuple[int, str]:
        """The effective min.insync.replicas of ``topic`` and where it comes from."""
        if topic in self.topic_min_insync:
            return self.topic_min_insync[topic], "topic config"
        return self.default_min_insync, "broker default"


def _ids(brokers: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(map(str, brokers)) + "]"


def judge(snapshot: ClusterSnapshot, broker: int, source: str = "kafka-admin") -> GateVerdict:
    """Go, or no go with every reason, for stopping ``broker`` now."""
    reasons: list[GateReason] = []
    if broker not in snapshot.live_brokers:
        reasons.append(
            GateReason(
                ReasonKind.BROKER_NOT_LIVE,
                f"broker {broker} is not among the cluster's live brokers {_ids(snapshot.live_brokers)}: it is down "
                "already or never joined. Start it and wait until its replicas are back in sync.",
                brokers=(broker,),
            )
        )
    for topic, code in sorted(snapshot.topic_errors.items()):
        reasons.append(
            GateReason(
                ReasonKind.METADATA_ERROR,
                f"topic {topic}: Kafka answered error code {code} for its metadata; the gate cannot judge it. Wait "
                "and retry, or check the topic with kafka-topics.sh --describe.",
                topic=topic,
            )
        )
    for p in sorted(snapshot.partitions, key=lambda p: (p.topic, p.partition)):
        name = f"{p.topic}-{p.partition}"
        if p.error_code not in (0, 9):  # 9 REPLICA_NOT_AVAILABLE: the state below still says what is missing
            reasons.append(
                GateReason(
                    ReasonKind.METADATA_ERROR,
                    f"{name}: Kafka answered error code {p.error_code} for this partition; the gate cannot judge it.",
                    p.topic,
                    p.partition,
                    p.replicas,
                )
            )
        if p.leader < 0:
            reasons.append(
                GateReason(
                    ReasonKind.OFFLINE,
                    f"{name} is offline (no leader; replicas {_ids(p.replicas)}, in sync {_ids(p.isr)}): bring its "
                    "replicas back before stopping any broker.",
                    p.topic,
                    p.partition,
                    p.replicas,
                )
            )
        missing = tuple(b for b in p.replicas if b not in p.isr)
        if missing:
            reasons.append(
                GateReason(
                    ReasonKind.UNDER_REPLICATED,
                    f"{name} is under-replicated: replicas {_ids(p.replicas)}, in sync {_ids(p.isr)}; broker(s) "
                    f"{_ids(missing)} not in sync. Wait for them to catch up.",
                    p.topic,
                    p.partition,
                    missing,
                )
            )
        if broker in p.isr:
            left = tuple(b for b in p.isr if b != broker)
            needed, origin = snapshot.min_insync(p.topic)
            if len(left) < needed:
                reasons.append(
                    GateReason(
                        ReasonKind.BELOW_MIN_ISR,
                        f"stopping broker {broker} would leave {name} with {len(left)} in-sync replica(s) "
                        f"{_ids(left)}, below its min.insync.replicas {needed} ({origin}): "
                        + (
                            "it would be offline for the whole window (no other in-sync copy). Add a replica first."
                            if not left
                            else "acks=all producers would fail for the whole window. Add a replica or lower "
                            "min.insync.replicas for the migration."
                        ),
                        p.topic,
                        p.partition,
                        (broker, *left),
                    )
                )
    for r in sorted(snapshot.reassignments, key=lambda r: (r.topic, r.partition)):
        reasons.append(
            GateReason(
                ReasonKind.REASSIGNING,
                f"{r.topic}-{r.partition} is being reassigned (replicas {_ids(r.replicas)}, adding "
                f"{_ids(r.adding)}, removing {_ids(r.removing)}): let it finish or cancel it "
                "(kafka-reassign-partitions.sh --cancel) first; pause reassignments for the rollout.",
                r.topic,
                r.partition,
                tuple(dict.fromkeys((*r.adding, *r.removing))),
            )
        )
    return GateVerdict(broker, not reasons, source, tuple(reasons))


IBP_WITHOUT_FORMAT_SETTINGS = (3, 0)  # from here on the format settings are ignored: every batch written is v2
FIRST_V2_FORMAT = (0, 11)
RAISE_IBP = (
    "Set inter.broker.protocol.version=3.0 or higher in every broker's server.properties (the brokers must run Kafka "
    "3.0 or later; log.message.format.version and message.format.version are then ignored) and do a plain rolling "
    "restart first; then run this again."
)


def kafka_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of a Kafka version setting ("0.10.2", "0.10.2-IV0", "2.8-IV1", "3.9"); None if unreadable."""
    match = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def _writes(version: tuple[int, int]) -> str:
    return "v2" if version >= FIRST_V2_FORMAT else "v1" if version >= (0, 10) else "v0"


def judge_formats(snapshot: ClusterSnapshot, source: str = "kafka-admin") -> GateVerdict:
    """Go when every broker writes v2 and no setting can make it write v0/v1 again; else every broker and topic that
    writes, or may write, legacy batches, with its settings and what to raise."""
    reasons: list[GateReason] = []
    below_3 = []
    for b in sorted(snapshot.broker_formats, key=lambda b: b.broker):
        if b.inter_broker_protocol is None:
            continue  # Kafka 4: v2 only
        ibp = kafka_version(b.inter_broker_protocol)
        if ibp is not None and ibp >= IBP_WITHOUT_FORMAT_SETTINGS:
            continue
        below_3.append(b.broker)
        fmt = kafka_version(b.log_message_format) if b.log_message_format else None
        settings = f"inter.broker.protocol.version {b.inter_broker_protocol}"
        if b.log_message_format is not None:
            settings += f", log.message.format.version {b.log_message_format}"
        known = [v for v in (ibp, fmt) if v is not None]
        if ibp is None or (b.log_message_format is not None and fmt is None):
            now = "the message format it writes cannot be told from them"
        elif _writes(min(known)) != "v2":
            now = (
                f"as a leader it writes {_writes(min(known))} batches, and its followers copy them as they are, so "
                "converted brokers would hold legacy data again"
            )
        else:
            now = (
                "it writes v2 now, but below 3.0 a topic's message.format.version (settable at any time) makes its "
                "leaders write v0/v1 again"
            )
        reasons.append(
            GateReason(
                ReasonKind.WRITES_LEGACY, f"broker {b.broker} has {settings}: {now}. {RAISE_IBP}", brokers=(b.broker,)
            )
        )
    if below_3:
        for topic, value in sorted(snapshot.topic_formats.items()):
            version = kafka_version(value)
            if version is None or version < FIRST_V2_FORMAT:
                reasons.append(
                    GateReason(
                        ReasonKind.WRITES_LEGACY,
                        f"topic {topic} sets message.format.version {value}: its leaders on broker(s) "
                        f"{_ids(below_3)} write {_writes(version) if version else 'an unknown format'}. Delete the "
                        f"setting (kafka-configs.sh --alter --entity-type topics --entity-name {topic} "
                        "--delete-config message.format.version), or raise inter.broker.protocol.version as above.",
                        topic=topic,
                        brokers=tuple(below_3),
                    )
                )
    return GateVerdict(-1, not reasons, source, tuple(reasons))
