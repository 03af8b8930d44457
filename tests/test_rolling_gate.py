"""The rolling cut-over's gate: its decisions on aiokafka's own response objects (encoded and decoded as aiokafka
reads them off the wire; no broker runs here), and the operator's gate command with real commands."""

from __future__ import annotations

import time

import pytest
from aiokafka.protocol.admin import (
    DescribeConfigsResponse_v0,
    DescribeConfigsResponse_v1,
    ListPartitionReassignmentsResponse_v0,
)
from aiokafka.protocol.metadata import MetadataResponse_v1, MetadataResponse_v5
from kafka_admin_stub import AdminCluster, KafkaAdminStub

from migrate.rolling.gate import GateReason, ReasonKind, judge, judge_formats
from migrate.rolling.kafka_admin import AdminApiGate, snapshot_from
from migrate.rolling.operator_gate import CommandGate, wait_for_go

BROKERS = [(1, "k1", 9092, None), (2, "k2", 9092, None), (3, "k3", 9092, None)]
TOPIC_CONFIG, DEFAULT_CONFIG, STATIC_BROKER_CONFIG = 1, 5, 4  # DescribeConfigs config_source values


def wire(response):
    """``response`` as aiokafka decodes it from the bytes a broker sends."""
    return type(response).decode(response.encode())


def partition(number, leader, replicas, isr, offline=()):
    return (0, number, leader, list(replicas), list(isr), list(offline))


def metadata(topics, brokers=BROKERS):
    return wire(MetadataResponse_v5(0, brokers, "cluster-a", 1, [(0, name, False, parts) for name, parts in topics]))


def min_isr_configs(broker_default=2, topics=()):
    """Broker 1..3's min.insync.replicas and each topic's (name, value, source)."""
    brokers = [
        (0, None, 4, str(b), [("min.insync.replicas", str(broker_default), True, STATIC_BROKER_CONFIG, False, [])])
        for b in (1, 2, 3)
    ]
    topic_resources = [
        (0, None, 2, name, [("min.insync.replicas", str(value), False, source, False, [])])
        for name, value, source in topics
    ]
    return [wire(DescribeConfigsResponse_v1(0, brokers)), wire(DescribeConfigsResponse_v1(0, topic_resources))]


def no_reassignments():
    return wire(ListPartitionReassignmentsResponse_v0(0, 0, None, [], {}))


HEALTHY = [
    ("orders", [partition(0, 1, (1, 2, 3), (1, 2, 3)), partition(1, 2, (2, 3, 1), (2, 3, 1))]),
    ("audit", [partition(0, 3, (3, 1), (3, 1))]),
]


def test_a_healthy_cluster_lets_each_broker_go():
    snapshot = snapshot_from(metadata(HEALTHY), min_isr_configs(broker_default=1), no_reassignments())
    assert snapshot.live_brokers == (1, 2, 3) and snapshot.default_min_insync == 1
    for broker in (1, 2, 3):
        verdict = judge(snapshot, broker)
        assert verdict.go and verdict.reasons == (), verdict.summary()


def test_an_under_replicated_partition_stops_every_broker_and_names_who_is_behind():
    topics = [("orders", [partition(0, 1, (1, 2, 3), (1, 2)), partition(1, 2, (2, 3, 1), (2, 3, 1))])]
    snapshot = snapshot_from(metadata(topics), min_isr_configs(broker_default=1), no_reassignments())
    verdict = judge(snapshot, 1)
    assert not verdict.go
    [reason] = verdict.reasons
    assert (reason.kind, reason.topic, reason.partition, reason.brokers) == (
        ReasonKind.UNDER_REPLICATED,
        "orders",
        0,
        (3,),
    )
    assert "orders-0 is under-replicated: replicas [1, 2, 3], in sync [1, 2]; broker(s) [3] not in sync" in (
        reason.message
    )
    assert not judge(snapshot, 3).go  # the broker that is behind may not go either: its partition has 2 copies


def test_min_insync_replicas_is_the_topics_own_else_the_brokers_default():
    topics = [
        ("payments", [partition(0, 1, (1, 2, 3), (1, 2, 3))]),  # sets 3 itself: no broker may stop
        ("orders", [partition(0, 2, (1, 2, 3), (1, 2, 3))]),  # describes 1, but only as Kafka's default
        ("audit", [partition(0, 3, (3, 1), (3, 1))]),  # RF 2 under the brokers' default 2
    ]
    configs = min_isr_configs(broker_default=2, topics=[("payments", 3, TOPIC_CONFIG), ("orders", 1, DEFAULT_CONFIG)])
    snapshot = snapshot_from(metadata(topics), configs, no_reassignments())
    assert snapshot.min_insync("payments") == (3, "topic config")
    assert snapshot.min_insync("orders") == (2, "broker default")

    verdict = judge(snapshot, 2)
    assert [(r.kind, r.topic, r.brokers) for r in verdict.reasons] == [
        (ReasonKind.BELOW_MIN_ISR, "payments", (2, 1, 3))
    ]
    assert (
        "stopping broker 2 would leave payments-0 with 2 in-sync replica(s) [1, 3], below its min.insync.replicas 3 "
        "(topic config)" in verdict.reasons[0].message
    )
    verdict = judge(snapshot, 1)
    assert [(r.topic, r.partition) for r in verdict.reasons] == [("audit", 0), ("payments", 0)]
    assert "below its min.insync.replicas 2 (broker default)" in verdict.reasons[0].message


def test_a_v0_describe_configs_marks_a_topics_own_value_by_is_default():
    topics = [("orders", [partition(0, 1, (1, 2), (1, 2))])]
    brokers = [(0, None, 4, "1", [("min.insync.replicas", "1", True, True, False)])]
    own = [(0, None, 2, "orders", [("min.insync.replicas", "2", False, False, False)])]
    configs = [wire(DescribeConfigsResponse_v0(0, brokers)), wire(DescribeConfigsResponse_v0(0, own))]
    snapshot = snapshot_from(metadata(topics), configs, None)
    assert snapshot.min_insync("orders") == (2, "topic config")
    assert [r.kind for r in judge(snapshot, 2).reasons] == [ReasonKind.BELOW_MIN_ISR]


def test_a_reassignment_in_flight_is_no_go_and_names_the_replicas_moving():
    moving = wire(
        ListPartitionReassignmentsResponse_v0(0, 0, None, [("orders", [(1, [2, 3, 1, 4], [4], [1], {})], {})], {})
    )
    snapshot = snapshot_from(metadata(HEALTHY), min_isr_configs(broker_default=1), moving)
    verdict = judge(snapshot, 2)
    [reason] = verdict.reasons
    assert (reason.kind, reason.topic, reason.partition, reason.brokers) == (
        ReasonKind.REASSIGNING,
        "orders",
        1,
        (4, 1),
    )
    assert "orders-1 is being reassigned (replicas [2, 3, 1, 4], adding [4], removing [1])" in reason.message


def test_an_offline_partition_and_a_broker_already_down_are_no_go():
    topics = [("orders", [partition(0, -1, (1, 3), (), offline=(1, 3))])]
    snapshot = snapshot_from(metadata(topics, brokers=BROKERS[:2]), min_isr_configs(broker_default=1), None)
    kinds = [r.kind for r in judge(snapshot, 3).reasons]
    assert kinds == [ReasonKind.BROKER_NOT_LIVE, ReasonKind.OFFLINE, ReasonKind.UNDER_REPLICATED]
    assert "broker 3 is not among the cluster's live brokers [1, 2]" in judge(snapshot, 3).reasons[0].message


def test_an_older_metadata_version_without_offline_replicas_still_judges():
    old = wire(
        MetadataResponse_v1(
            [(1, "k1", 9092, None), (2, "k2", 9092, None)],
            1,
            [(0, "orders", False, [(0, 0, 1, [1, 2], [1])])],
        )
    )
    snapshot = snapshot_from(old, min_isr_configs(broker_default=1), None)
    assert [r.kind for r in judge(snapshot, 2).reasons] == [ReasonKind.UNDER_REPLICATED]
    reasons = judge(snapshot, 1).reasons
    assert [r.kind for r in reasons] == [ReasonKind.UNDER_REPLICATED, ReasonKind.BELOW_MIN_ISR]
    assert (
        "would leave orders-0 with 0 in-sync replica(s) [], below its min.insync.replicas 1 (broker default): it "
        "would be offline for the whole window" in reasons[1].message
    )


def test_kafka_unreachable_is_no_go_saying_why():
    started = time.monotonic()
    verdict = AdminApiGate("127.0.0.1:1", timeout_s=2).check(1)
    assert time.monotonic() - started < 10
    assert not verdict.go and verdict.reasons[0].kind == ReasonKind.GATE_UNAVAILABLE
    assert "could not ask Kafka at 127.0.0.1:1" in verdict.reasons[0].message


def format_configs(brokers, topics=()):
    """DescribeConfigs as a cluster answers it: each broker's (id, inter.broker.protocol.version,
    log.message.format.version), None where the broker has no such setting (Kafka 4), and each topic's
    (name, message.format.version, source)."""
    resources = []
    for b, ibp, lmf in brokers:
        entries = [("min.insync.replicas", "1", True, STATIC_BROKER_CONFIG, False, [])]
        entries += [
            (name, value, True, STATIC_BROKER_CONFIG, False, [])
            for name, value in (("inter.broker.protocol.version", ibp), ("log.message.format.version", lmf))
            if value is not None
        ]
        resources.append((0, None, 4, str(b), entries))
    topic_resources = [
        (0, None, 2, name, [("message.format.version", value, False, source, False, [])])
        for name, value, source in topics
    ]
    return [wire(DescribeConfigsResponse_v1(0, resources)), wire(DescribeConfigsResponse_v1(0, topic_resources))]


def formats_verdict(brokers, topics=()):
    return judge_formats(snapshot_from(metadata(HEALTHY), format_configs(brokers, topics), no_reassignments()))


def test_brokers_at_protocol_3_0_or_later_or_on_kafka_4_write_v2_only_and_pass_the_format_check():
    assert formats_verdict([(1, "3.0-IV1", "0.10.2-IV0"), (2, "3.9", "3.9-IV0"), (3, "3.9", None)]).go
    assert formats_verdict([(1, None, None), (2, None, None), (3, None, None)]).go  # Kafka 4: no such settings
    # a topic's old message.format.version is ignored from 3.0 on (KIP-724)
    assert formats_verdict([(b, "3.6", "3.6") for b in (1, 2, 3)], [("ret", "0.10.2", TOPIC_CONFIG)]).go


def test_a_broker_whose_leaders_write_v1_refuses_naming_the_broker_its_settings_and_what_to_raise():
    verdict = formats_verdict([(1, "3.9", "3.9"), (2, "2.8-IV1", "0.10.2-IV0"), (3, "3.9", "3.9")])
    assert not verdict.go
    [reason] = verdict.reasons
    assert (reason.kind, reason.brokers) == (ReasonKind.WRITES_LEGACY, (2,))
    assert reason.message.startswith(
        "broker 2 has inter.broker.protocol.version 2.8-IV1, log.message.format.version 0.10.2-IV0: as a leader it "
        "writes v1 batches, and its followers copy them as they are"
    )
    assert "Set inter.broker.protocol.version=3.0 or higher in every broker's server.properties" in reason.message
    assert "a plain rolling restart first" in reason.message
    assert verdict.summary().startswith("gate (kafka-admin) for the brokers' write format: NO GO")
    v0 = formats_verdict([(1, "0.9.0", "0.9.0"), (2, "3.9", "3.9"), (3, "3.9", "3.9")]).reasons[0].message
    assert "as a leader it writes v0 batches" in v0


def test_a_broker_below_protocol_3_0_that_writes_v2_is_refused_too_and_a_topics_old_format_is_named():
    verdict = formats_verdict(
        [(1, "2.8", "2.8"), (2, "3.9", "3.9"), (3, "3.9", "3.9")],
        [("ret", "0.10.2", TOPIC_CONFIG), ("orders", "0.10.2", DEFAULT_CONFIG), ("audit", "2.8", TOPIC_CONFIG)],
    )
    assert [(r.kind, r.topic, r.brokers) for r in verdict.reasons] == [
        (ReasonKind.WRITES_LEGACY, "", (1,)),
        (ReasonKind.WRITES_LEGACY, "ret", (1,)),  # only the topic's own setting; orders only reports a default
    ]
    assert "it writes v2 now, but below 3.0 a topic's message.format.version" in verdict.reasons[0].message
    assert (
        "topic ret sets message.format.version 0.10.2: its leaders on broker(s) [1] write v1. Delete the setting "
        "(kafka-configs.sh --alter --entity-type topics --entity-name ret --delete-config message.format.version)"
        in verdict.reasons[1].message
    )


def test_kafka_unreachable_leaves_the_format_check_no_go_too():
    verdict = AdminApiGate("127.0.0.1:1", timeout_s=2).check_formats()
    assert not verdict.go and verdict.reasons[0].kind == ReasonKind.GATE_UNAVAILABLE


# --- the operator's gate command ------------------------------------------------------------------------------


def test_a_gate_command_says_go_with_exit_0_and_no_go_otherwise():
    assert CommandGate("true").check(1).go
    verdict = CommandGate("false").check(2)
    assert not verdict.go and "the gate command `false` exited 1: no go" in verdict.reasons[0].message


def test_a_gate_commands_reasons_are_shown_with_the_broker_substituted(tmp_path):
    script = tmp_path / "cruise-control-check.sh"
    script.write_text(
        '#!/bin/sh\necho "broker $1 (env $KAFKA_LOG_MIGRATE_BROKER): anomaly detector is fixing a disk failure"\n'
        'echo "try again after 10 min" >&2\nexit 3\n'
    )
    script.chmod(0o755)
    verdict = CommandGate(f"{script} {{broker}}").check(2)
    assert not verdict.go
    assert verdict.output == ("broker 2 (env 2): anomaly detector is fixing a disk failure\ntry again after 10 min\n")
    assert f"`{script} 2` exited 3" in verdict.reasons[0].message
    assert "| broker 2 (env 2): anomaly detector" in verdict.summary()


def test_a_gate_command_printing_bytes_that_are_not_utf8_is_shown_with_replacement_characters():
    verdict = CommandGate(r"printf 'broker 2: ISR \377\376 short\n'; exit 1").check(2)
    assert not verdict.go and "broker 2: ISR \ufffd\ufffd short" in verdict.output


def test_a_gate_command_that_hangs_is_killed_at_its_timeout_and_is_no_go():
    started = time.monotonic()
    verdict = CommandGate("echo checking; sleep 30", timeout_s=0.5).check(1)
    assert time.monotonic() - started < 5  # the shell and its sleep killed, not waited for
    assert not verdict.go and "did not finish within 0.5 s" in verdict.reasons[0].message
    assert verdict.output == "checking\n"


def test_waiting_for_the_gate_retries_until_it_opens_or_the_timeout(tmp_path):
    counter = tmp_path / "count"
    # no go twice (URPs catching up), then go
    command = f'n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; [ "$n" -ge 2 ]'
    seen = []
    verdicts = wait_for_go([CommandGate(command)], 3, timeout_s=30, interval_s=0.05, on_verdict=seen.append)
    assert [v.go for v in seen] == [False, False, True] and verdicts[0].go
    started = time.monotonic()
    verdicts = wait_for_go([CommandGate("true"), CommandGate("false")], 3, timeout_s=0.3, interval_s=0.1)
    assert not verdicts[1].go and verdicts[0].go and time.monotonic() - started < 3


@pytest.mark.parametrize("command", ["exit 0", "echo ok"])
def test_the_broker_placeholder_is_optional(command):
    assert CommandGate(command).check(7).go


# --- the Admin API client over a socket -----------------------------------------------------------------------


def stub_cluster(reachable=(1, 2, 3), ibp="3.9"):
    return AdminCluster(
        brokers={b: b in reachable for b in (1, 2, 3)},
        topics={"orders": [(0, 1, [1, 2, 3], [1, 2, 3])], "ret": [(0, 2, [2, 3, 1], [2, 3, 1])]},
        broker_configs={
            1: {"inter.broker.protocol.version": "3.9", "log.message.format.version": "3.9"},
            2: {"inter.broker.protocol.version": ibp, "log.message.format.version": "0.10.2-IV0"},
            3: {"inter.broker.protocol.version": "3.9"},
        },
        topic_configs={"ret": {"message.format.version": "0.10.2"}},
    )


def test_the_admin_api_gate_reads_a_clusters_formats_and_health_through_kafkas_protocol():
    with KafkaAdminStub(stub_cluster(ibp="2.8-IV1")) as kafka:
        gate = AdminApiGate(kafka.bootstrap, timeout_s=5)
        snapshot = gate.snapshot()
        assert not isinstance(snapshot, GateReason), snapshot
        assert [(b.broker, b.inter_broker_protocol, b.log_message_format) for b in snapshot.broker_formats] == [
            (1, "3.9", "3.9"),
            (2, "2.8-IV1", "0.10.2-IV0"),
            (3, "3.9", None),
        ]
        assert snapshot.topic_formats == {"ret": "0.10.2"}
        assert gate.check(1).go
        formats = gate.check_formats()
        assert [(r.kind, r.topic, r.brokers) for r in formats.reasons] == [
            (ReasonKind.WRITES_LEGACY, "", (2,)),
            (ReasonKind.WRITES_LEGACY, "ret", (2,)),
        ]
        assert "broker 2 has inter.broker.protocol.version 2.8-IV1" in formats.summary()


def test_a_broker_named_by_kafka_that_does_not_answer_is_its_own_no_go_not_advice_to_check_the_configuration():
    with KafkaAdminStub(stub_cluster(reachable=(1, 3))) as kafka:  # broker 2 is stopping: its port refuses
        verdict = AdminApiGate(kafka.bootstrap, timeout_s=1).check(1)
    assert not verdict.go
    [reason] = verdict.reasons
    assert reason.kind == ReasonKind.NODE_NOT_READY, reason
    assert f"Kafka at {kafka.bootstrap} answered, but a broker it named did not" in reason.message
    assert "usual for a few seconds while a broker stops or starts" in reason.message
    assert "--bootstrap-server" not in reason.message
