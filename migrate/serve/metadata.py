"""Metadata (key 3), served in versions 0-12, flexible from 9 (MetadataRequest.json, MetadataResponse.json).

::

    MetadataRequest   topics => [topic_id => uuid (10+), name => string (nullable 10+)]   (nullable 1+)
                      allow_auto_topic_creation => bool (4+, default true)
                      include_cluster_authorized_operations => bool (8-10)
                      include_topic_authorized_operations => bool (8+)
    MetadataResponse  throttle_time_ms => int32 (3+)
                      brokers => [node_id => int32, host => string, port => int32,
                                  rack => nullable string (1+)]
                      cluster_id => nullable string (2+)
                      controller_id => int32 (1+, default -1)
                      topics => [error_code => int16, name => string (nullable 12+), topic_id => uuid (10+),
                                 is_internal => bool (1+),
                                 partitions => [error_code => int16, partition_index => int32, leader_id => int32,
                                                leader_epoch => int32 (7+, default -1), replica_nodes => [int32],
                                                isr_nodes => [int32], offline_replicas => [int32] (5+)],
                                 topic_authorized_operations => int32 (8+, default -2^31)]
                      cluster_authorized_operations => int32 (8-10, default -2^31)

In version 0 an empty topic list asks for every topic; from version 1 on a null list does, and an empty one for none.
"""

from __future__ import annotations

from dataclasses import dataclass

from migrate.serve.wire import Api, Kind, Versions, array, boolean, int16, int32, string, uuid

NO_OPERATIONS = -(2**31)


@dataclass
class MetadataRequestTopic:
    topic_id: bytes = uuid("10+")
    name: str | None = string("0+", nullable="10+")


@dataclass
class MetadataRequest:
    topics: list[MetadataRequestTopic] | None = array(MetadataRequestTopic, "0+", nullable="1+")
    allow_auto_topic_creation: bool = boolean("4+", True)
    include_cluster_authorized_operations: bool = boolean("8-10")
    include_topic_authorized_operations: bool = boolean("8+")


@dataclass
class MetadataResponseBroker:
    node_id: int = int32("0+")
    host: str = string("0+")
    port: int = int32("0+")
    rack: str | None = string("1+", None, nullable="1+")


@dataclass
class MetadataResponsePartition:
    error_code: int = int16("0+")
    partition_index: int = int32("0+")
    leader_id: int = int32("0+")
    leader_epoch: int = int32("7+", -1)
    replica_nodes: list[int] = array(Kind.INT32, "0+")
    isr_nodes: list[int] = array(Kind.INT32, "0+")
    offline_replicas: list[int] = array(Kind.INT32, "5+")


@dataclass
class MetadataResponseTopic:
    error_code: int = int16("0+")
    name: str | None = string("0+", nullable="12+")
    topic_id: bytes = uuid("10+")
    is_internal: bool = boolean("1+")
    partitions: list[MetadataResponsePartition] = array(MetadataResponsePartition, "0+")
    topic_authorized_operations: int = int32("8+", NO_OPERATIONS)


@dataclass
class MetadataResponse:
    throttle_time_ms: int = int32("3+")
    brokers: list[MetadataResponseBroker] = array(MetadataResponseBroker, "0+")
    cluster_id: str | None = string("2+", None, nullable="2+")
    controller_id: int = int32("1+", -1)
    topics: list[MetadataResponseTopic] = array(MetadataResponseTopic, "0+")
    cluster_authorized_operations: int = int32("8-10", NO_OPERATIONS)


API = Api(3, "Metadata", MetadataRequest, MetadataResponse, Versions.parse("0-12"), Versions.parse("9+"))
