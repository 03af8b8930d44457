"""May this broker be stopped now? The gate a rolling cut-over passes before each broker.

A broker may be stopped only when the cluster can lose it without losing availability or durability:

- no partition is under-replicated (an in-sync set smaller than its replica set: stopping another replica of it
  could leave its only in-sync copy on one broker, or none) and none is offline (no leader);
- no partition that this broker holds in sync would fall below its ``min.insync.replicas`` once it stops (then
  ``acks=all`` producers fail for the whole window; Strimzi's roller refuses exactly this). The value is the
  topic's own config where the topic sets one, else the broker's default;
- no partition reassignment is in flight (a replica being added copies the leader's format, so which brokers end up
  converted would depend on who led; online-prestage-facts.md §5).

``judge`` is the decision: a pure function of a ``ClusterSnapshot`` (built from Kafka's Admin API responses by
``kafka_admin.snapshot_from``), returning a ``GateVerdict`` whose reasons name the topic, partition and brokers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class ReasonKind(str, enum.Enum):
    UNDER_REPLICATED = "under-replicated"
    OFFLINE = "offline"  # no leader
    BELOW_MIN_ISR = "below-min-insync-replicas"  # what stopping this broker would do
    REASSIGNING = "reassignment-in-flight"
    BROKER_NOT_LIVE = "broker-not-live"
    METADATA_ERROR = "metadata-error"  # Kafka answered with an error for a topic or partition
    GATE_UNAVAILABLE = "gate-unavailable"  # the gate could not ask (Kafka unreachable, the command failed to run)
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
    broker: int
    go: bool
    source: str  # which gate: "kafka-admin bootstrap=...", "command: ..."
    reasons: tuple[GateReason, ...] = ()
    output: str = ""  # what a gate command printed

    def summary(self) -> str:
        head = f"gate ({self.source}) for broker {self.broker}: {'GO' if self.go else 'NO GO'}"
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
class ClusterSnapshot:
    """What the gate decides on: one look at the cluster through its Admin API."""

    live_brokers: tuple[int, ...]
    partitions: tuple[PartitionState, ...]
    reassignments: tuple[Reassignment, ...]
    default_min_insync: int  # the broker's min.insync.replicas (Kafka's default is 1)
    topic_min_insync: dict[str, int] = field(default_factory=dict)  # topics that set their own
    topic_errors: dict[str, int] = field(default_factory=dict)  # topic -> Kafka error code

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
