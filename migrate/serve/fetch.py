"""Fetch (key 1), served in versions 4-16, flexible from 12 (FetchRequest.json, FetchResponse.json).

::

    FetchRequest   tagged (12+): 0 cluster_id => nullable string
                   replica_id => int32 (0-14, default -1)
                   tagged (15+): 1 replica_state => {replica_id => int32, replica_epoch => int64}
                   max_wait_ms => int32, min_bytes => int32, max_bytes => int32 (3+, default 2^31-1)
                   isolation_level => int8 (4+), session_id => int32 (7+), session_epoch => int32 (7+, default -1)
                   topics => [topic => string (0-12), topic_id => uuid (13+),
                              partitions => [partition => int32, current_leader_epoch => int32 (9+, default -1),
                                             fetch_offset => int64, last_fetched_epoch => int32 (12+, default -1),
                                             log_start_offset => int64 (5+, default -1),
                                             partition_max_bytes => int32]]
                   forgotten_topics_data => [topic => string (7-12), topic_id => uuid (13+),
                                             partitions => [int32]]   (7+)
                   rack_id => string (11+)
    FetchResponse  throttle_time_ms => int32 (1+), error_code => int16 (7+), session_id => int32 (7+)
                   responses => [topic => string (0-12), topic_id => uuid (13+),
                                 partitions => [partition_index => int32, error_code => int16,
                                                high_watermark => int64,
                                                last_stable_offset => int64 (4+, default -1),
                                                log_start_offset => int64 (5+, default -1),
                                                tagged (12+): 0 diverging_epoch => {epoch => int32,
                                                                                    end_offset => int64}
                                                              1 current_leader => {leader_id => int32,
                                                                                   leader_epoch => int32}
                                                              2 snapshot_id => {end_offset => int64,
                                                                                epoch => int32}
                                                aborted_transactions => nullable [producer_id => int64,
                                                                                  first_offset => int64] (4+)
                                                preferred_read_replica => int32 (11+, default -1)
                                                records => nullable records]]
                   tagged (16+): 0 node_endpoints => [node_id => int32, host => string, port => int32,
                                                      rack => nullable string]

Versions 0-3 (logs of message format v0/v1 only, and a hard byte limit) are not served: Kafka 4.0 removed them too.
"""

from __future__ import annotations

from dataclasses import dataclass

from migrate.serve.wire import Api, Kind, Versions, array, int8, int16, int32, int64, records, string, struct_, uuid


@dataclass
class ReplicaState:
    replica_id: int = int32("15+", -1)
    replica_epoch: int = int64("15+", -1)


@dataclass
class FetchPartition:
    partition: int = int32("0+")
    current_leader_epoch: int = int32("9+", -1)
    fetch_offset: int = int64("0+")
    last_fetched_epoch: int = int32("12+", -1)
    log_start_offset: int = int64("5+", -1)
    partition_max_bytes: int = int32("0+")


@dataclass
class FetchTopic:
    topic: str = string("0-12")
    topic_id: bytes = uuid("13+")
    partitions: list[FetchPartition] = array(FetchPartition, "0+")


@dataclass
class ForgottenTopic:
    topic: str = string("7-12")
    topic_id: bytes = uuid("13+")
    partitions: list[int] = array(Kind.INT32, "7+")


@dataclass
class FetchRequest:
    cluster_id: str | None = string("12+", None, nullable="12+", tag=0)
    replica_id: int = int32("0-14", -1)
    replica_state: ReplicaState | None = struct_(ReplicaState, "15+", tag=1)
    max_wait_ms: int = int32("0+")
    min_bytes: int = int32("0+")
    max_bytes: int = int32("3+", 0x7FFFFFFF)
    isolation_level: int = int8("4+")
    session_id: int = int32("7+")
    session_epoch: int = int32("7+", -1)
    topics: list[FetchTopic] = array(FetchTopic, "0+")
    forgotten_topics_data: list[ForgottenTopic] = array(ForgottenTopic, "7+")
    rack_id: str = string("11+")


@dataclass
class EpochEndOffset:
    epoch: int = int32("12+", -1)
    end_offset: int = int64("12+", -1)


@dataclass
class LeaderIdAndEpoch:
    leader_id: int = int32("12+", -1)
    leader_epoch: int = int32("12+", -1)


@dataclass
class SnapshotId:
    end_offset: int = int64("0+", -1)
    epoch: int = int32("0+", -1)


@dataclass
class AbortedTransaction:
    producer_id: int = int64("4+")
    first_offset: int = int64("4+")


@dataclass
class PartitionData:
    partition_index: int = int32("0+")
    error_code: int = int16("0+")
    high_watermark: int = int64("0+")
    last_stable_offset: int = int64("4+", -1)
    log_start_offset: int = int64("5+", -1)
    diverging_epoch: EpochEndOffset | None = struct_(EpochEndOffset, "12+", tag=0)
    current_leader: LeaderIdAndEpoch | None = struct_(LeaderIdAndEpoch, "12+", tag=1)
    snapshot_id: SnapshotId | None = struct_(SnapshotId, "12+", tag=2)
    aborted_transactions: list[AbortedTransaction] | None = array(AbortedTransaction, "4+", nullable="4+")
    preferred_read_replica: int = int32("11+", -1)
    records: bytes | None = records("0+", nullable="0+")


@dataclass
class FetchableTopicResponse:
    topic: str = string("0-12")
    topic_id: bytes = uuid("13+")
    partitions: list[PartitionData] = array(PartitionData, "0+")


@dataclass
class NodeEndpoint:
    node_id: int = int32("16+")
    host: str = string("16+")
    port: int = int32("16+")
    rack: str | None = string("16+", None, nullable="16+")


@dataclass
class FetchResponse:
    throttle_time_ms: int = int32("1+")
    error_code: int = int16("7+")
    session_id: int = int32("7+")
    responses: list[FetchableTopicResponse] = array(FetchableTopicResponse, "0+")
    node_endpoints: list[NodeEndpoint] = array(NodeEndpoint, "16+", tag=0)


API = Api(1, "Fetch", FetchRequest, FetchResponse, Versions.parse("4-16"), Versions.parse("12+"))
