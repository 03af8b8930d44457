"""The gate's snapshot of a cluster, from Kafka's Admin API through aiokafka's admin client.

Why aiokafka (0.14, already a test dependency, pure Python): its ``AIOKafkaAdminClient`` sends the three requests
the gate needs, Metadata (replicas, in-sync replicas, offline replicas, leader, live brokers), DescribeConfigs (a
topic's ``min.insync.replicas`` with the source of its value, and a broker's default) and, through its protocol
module, ListPartitionReassignments (API key 46, KIP-455; the client has no public method for it, so it is sent to
the controller as the client's own admin calls are). confluent-kafka (librdkafka) describes topics and configs too,
but its AdminClient has no call that lists partition reassignments, and it would add a native dependency.

``snapshot_from`` turns aiokafka's own response objects into the gate's ``ClusterSnapshot`` (the tests build those
objects as aiokafka decodes them off the wire); ``look`` asks a live cluster for them. Nothing here has run against a
live broker in this project's tests: no broker runs there (README, "A rolling cut-over").
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from migrate.errors import MigrateError
from migrate.rolling.gate import (
    BrokerFormat,
    ClusterSnapshot,
    GateReason,
    GateVerdict,
    PartitionState,
    ReasonKind,
    Reassignment,
    judge,
    judge_formats,
)

MIN_INSYNC = "min.insync.replicas"
IBP = "inter.broker.protocol.version"
LOG_MESSAGE_FORMAT = "log.message.format.version"  # a broker's default message format (below IBP 3.0 only)
MESSAGE_FORMAT = "message.format.version"  # a topic's own (below IBP 3.0 only)
BROKER_CONFIGS = (MIN_INSYNC, IBP, LOG_MESSAGE_FORMAT)
TOPIC_CONFIGS = (MIN_INSYNC, MESSAGE_FORMAT)
KAFKA_DEFAULT_MIN_INSYNC = 1
RESOURCE_TOPIC = 2  # DescribeConfigs resource types (ConfigResource.Type)
RESOURCE_BROKER = 4
SOURCE_TOPIC_CONFIG = 1  # DescribeConfigs v1+ config_source: set on the topic itself (DescribeConfigsResponse)


def snapshot_from(metadata: Any, configs: Sequence[Any], reassignments: Any | None) -> ClusterSnapshot:
    """The snapshot of a MetadataResponse, DescribeConfigsResponses (brokers' and topics' min.insync.replicas) and
    a ListPartitionReassignmentsResponse, each an aiokafka response object of any version it decodes."""
    meta = metadata.to_object()
    partitions: list[PartitionState] = []
    topic_errors: dict[str, int] = {}
    for t in meta["topics"]:
        if t["error_code"]:
            topic_errors[t["topic"]] = t["error_code"]
        for p in t["partitions"]:
            partitions.append(
                PartitionState(
                    t["topic"],
                    p["partition"],
                    p["leader"],
                    tuple(p["replicas"]),
                    tuple(p["isr"]),
                    tuple(p.get("offline_replicas") or ()),
                    p["error_code"],
                )
            )
    defaults: list[int] = []
    topic_min: dict[str, int] = {}
    broker_settings: dict[int, dict[str, str]] = {}
    topic_formats: dict[str, str] = {}
    for response in configs:
        for r in response.to_object()["resources"]:
            if r["error_code"]:
                raise MigrateError(
                    f"DescribeConfigs for {'broker' if r['resource_type'] == RESOURCE_BROKER else 'topic'} "
                    f"{r['resource_name']} failed with Kafka error code {r['error_code']} ({r['error_message']}): "
                    "the gate needs every min.insync.replicas. Check the admin client's ACLs (DescribeConfigs)."
                )
            if r["resource_type"] == RESOURCE_BROKER:
                broker_settings.setdefault(int(r["resource_name"]), {})
            for entry in r["config_entries"]:
                name, text = entry["config_names"], entry["config_value"]
                if text is None:
                    continue
                if r["resource_type"] == RESOURCE_BROKER:
                    broker_settings[int(r["resource_name"])][name] = text
                    if name == MIN_INSYNC:
                        defaults.append(_number(text, r["resource_name"], name))
                elif _set_on_topic(entry):
                    if name == MIN_INSYNC:
                        topic_min[r["resource_name"]] = _number(text, r["resource_name"], name)
                    elif name == MESSAGE_FORMAT:
                        topic_formats[r["resource_name"]] = text
    moving: list[Reassignment] = []
    if reassignments is not None:
        body = reassignments.to_object()
        if body["error_code"]:
            raise MigrateError(
                f"ListPartitionReassignments failed with Kafka error code {body['error_code']} "
                f"({body['error_message']}): the gate cannot tell whether a reassignment is in flight."
            )
        for t in body["topics"]:
            for p in t["partitions"]:
                moving.append(
                    Reassignment(
                        t["name"],
                        p["partition_index"],
                        tuple(p["replicas"]),
                        tuple(p["adding_replicas"]),
                        tuple(p["removing_replicas"]),
                    )
                )
    return ClusterSnapshot(
        live_brokers=tuple(sorted(b["node_id"] for b in meta["brokers"])),
        partitions=tuple(partitions),
        reassignments=tuple(moving),
        # brokers should agree; if they do not, the strictest one is what a leader there would enforce
        default_min_insync=max(defaults, default=KAFKA_DEFAULT_MIN_INSYNC),
        topic_min_insync=topic_min,
        topic_errors=topic_errors,
        broker_formats=tuple(
            BrokerFormat(b, settings.get(IBP), settings.get(LOG_MESSAGE_FORMAT))
            for b, settings in sorted(broker_settings.items())
        ),
        topic_formats=topic_formats,
    )


def _number(text: str, resource: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise MigrateError(f"DescribeConfigs for {resource}: {name} is {text!r}, not a number") from None


def _set_on_topic(entry: dict[str, Any]) -> bool:
    if "config_source" in entry:  # v1+
        return bool(entry["config_source"] == SOURCE_TOPIC_CONFIG)
    return not entry.get("is_default", True)  # v0: a topic resource's non-default value is the topic's own


class ClusterSettling(Exception):
    """Kafka answered at the bootstrap address, but a broker or controller it named did not (stopping, starting,
    or its connection not yet made): expected for a few seconds around a broker's stop or start."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__)


async def _look(bootstrap: str, timeout_ms: int, client_options: dict[str, Any]) -> tuple[Any, list[Any], Any]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, **client_options)
    await admin.start()  # fails here when nothing answers at the bootstrap address: the configuration's business
    try:
        return await _ask(admin, timeout_ms)
    except TimeoutError as exc:  # a broker the metadata named never became ready
        raise ClusterSettling(exc) from exc
    except Exception as exc:
        if getattr(exc, "retriable", False):  # aiokafka's mark of a node not ready, a stale leader or controller
            raise ClusterSettling(exc) from exc
        raise
    finally:
        await admin.close()


async def _ask(admin: Any, timeout_ms: int) -> tuple[Any, list[Any], Any]:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.protocol.admin import ListPartitionReassignmentsRequest

    metadata = await admin._get_cluster_metadata()  # one response: brokers and partitions seen together
    meta = metadata.to_object()
    brokers = dict.fromkeys(BROKER_CONFIGS)
    topics = dict.fromkeys(TOPIC_CONFIGS)
    resources = [ConfigResource(ConfigResourceType.BROKER, str(b["node_id"]), brokers) for b in meta["brokers"]]
    resources += [ConfigResource(ConfigResourceType.TOPIC, t["topic"], topics) for t in meta["topics"]]
    configs = await admin.describe_configs(resources)
    # topics null: every reassignment in flight (ListPartitionReassignmentsRequest, KIP-455)
    moving = await admin._send_to_controller(ListPartitionReassignmentsRequest(timeout_ms, None, {}))
    return metadata, list(configs), moving


class AdminApiGate:
    """The gate through Kafka's Admin API at ``bootstrap`` (``--bootstrap-server``)."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0, client_options: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.client_options = client_options or {}
        self.source = f"kafka-admin {bootstrap}"

    def check(self, broker: int) -> GateVerdict:
        snapshot = self.snapshot()
        if isinstance(snapshot, GateReason):
            return GateVerdict(broker, False, self.source, (snapshot,))
        return judge(snapshot, broker, self.source)

    def check_formats(self) -> GateVerdict:
        snapshot = self.snapshot()
        if isinstance(snapshot, GateReason):
            return GateVerdict(-1, False, self.source, (snapshot,))
        return judge_formats(snapshot, self.source)

    def snapshot(self) -> ClusterSnapshot | GateReason:
        """One look at the cluster, or why there was none (never a go)."""
        try:
            metadata, configs, moving = asyncio.run(
                asyncio.wait_for(
                    _look(self.bootstrap, int(self.timeout_s * 1000), self.client_options), self.timeout_s * 2
                )
            )
            return snapshot_from(metadata, configs, moving)
        except ClusterSettling as exc:
            return GateReason(
                ReasonKind.NODE_NOT_READY,
                f"Kafka at {self.bootstrap} answered, but a broker it named did not ({exc}): usual for a few seconds "
                "while a broker stops or starts. Not a go; the gate asks again.",
            )
        except Exception as exc:  # unreachable, refused, timed out, an error code: no answer is never a go
            return GateReason(
                ReasonKind.GATE_UNAVAILABLE,
                f"could not ask Kafka at {self.bootstrap} ({type(exc).__name__}: {exc}); check --bootstrap-server "
                "and --admin-config, and that this host reaches the brokers",
            )


ADMIN_CONFIG_KEYS = {  # --admin-config keys (Kafka's client property names) -> AIOKafkaAdminClient arguments
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.plain.username": "sasl_plain_username",
    "sasl.plain.password": "sasl_plain_password",
}
SSL_KEYS = ("ssl.cafile", "ssl.certfile", "ssl.keyfile", "ssl.password")


def client_options_from(path: str) -> dict[str, Any]:
    """AIOKafkaAdminClient's arguments from a properties file (``--admin-config``): security.protocol,
    sasl.mechanism, sasl.plain.username/password, and ssl.cafile/certfile/keyfile/password (PEM files)."""
    from pathlib import Path

    from migrate.kafka.properties import _java_properties

    props = {key: value for _, key, value in _java_properties(Path(path))}
    unknown = sorted(set(props) - set(ADMIN_CONFIG_KEYS) - set(SSL_KEYS))
    if unknown:
        raise MigrateError(
            f"{path}: unknown key(s) {', '.join(unknown)}; the admin client takes "
            f"{', '.join([*ADMIN_CONFIG_KEYS, *SSL_KEYS])}"
        )
    options: dict[str, Any] = {ADMIN_CONFIG_KEYS[k]: v for k, v in props.items() if k in ADMIN_CONFIG_KEYS}
    if any(k in props for k in SSL_KEYS):
        from aiokafka.helpers import create_ssl_context

        options["ssl_context"] = create_ssl_context(
            cafile=props.get("ssl.cafile"),
            certfile=props.get("ssl.certfile"),
            keyfile=props.get("ssl.keyfile"),
            password=props.get("ssl.password"),
        )
    return options
