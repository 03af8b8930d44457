"""A group's committed offsets: OffsetCommit (key 8, versions 0-8, flexible 8+) and OffsetFetch (key 9, versions
0-7, flexible 6+) (their *Request.json and *Response.json).

::

    OffsetCommitRequest   group_id => string, generation_id_or_member_epoch => int32 (1+, default -1),
                          member_id => string (1+),
                          group_instance_id => nullable string (7+), retention_time_ms => int64 (2-4, default -1),
                          topics => [name => string,
                                     partitions => [partition_index => int32, committed_offset => int64,
                                                    committed_leader_epoch => int32 (6+, default -1),
                                                    commit_timestamp => int64 (1 only, default -1),
                                                    committed_metadata => nullable string]]
    OffsetCommitResponse  throttle_time_ms => int32 (3+),
                          topics => [name => string, partitions => [partition_index => int32, error_code => int16]]
    OffsetFetchRequest    group_id => string,
                          topics => [name => string, partition_indexes => [int32]] (nullable 2+: every topic),
                          require_stable => bool (7+)
    OffsetFetchResponse   throttle_time_ms => int32 (3+),
                          topics => [name => string,
                                     partitions => [partition_index => int32, committed_offset => int64,
                                                    committed_leader_epoch => int32 (5+, default -1),
                                                    metadata => nullable string, error_code => int16]]
                          error_code => int16 (2+)
"""

from __future__ import annotations

from dataclasses import dataclass

from migrate.serve.wire import Api, Kind, Versions, array, boolean, int16, int32, int64, string


@dataclass
class OffsetCommitRequestPartition:
    partition_index: int = int32("0+")
    committed_offset: int = int64("0+")
    committed_leader_epoch: int = int32("6+", -1)
    commit_timestamp: int = int64("1", -1)
    committed_metadata: str | None = string("0+", nullable="0+")


@dataclass
class OffsetCommitRequestTopic:
    name: str = string("0+")
    partitions: list[OffsetCommitRequestPartition] = array(OffsetCommitRequestPartition, "0+")


@dataclass
class OffsetCommitRequest:
    group_id: str = string("0+")
    generation_id_or_member_epoch: int = int32("1+", -1)
    member_id: str = string("1+")
    group_instance_id: str | None = string("7+", None, nullable="7+")
    retention_time_ms: int = int64("2-4", -1)
    topics: list[OffsetCommitRequestTopic] = array(OffsetCommitRequestTopic, "0+")


@dataclass
class OffsetCommitResponsePartition:
    partition_index: int = int32("0+")
    error_code: int = int16("0+")


@dataclass
class OffsetCommitResponseTopic:
    name: str = string("0+")
    partitions: list[OffsetCommitResponsePartition] = array(OffsetCommitResponsePartition, "0+")


@dataclass
class OffsetCommitResponse:
    throttle_time_ms: int = int32("3+")
    topics: list[OffsetCommitResponseTopic] = array(OffsetCommitResponseTopic, "0+")


@dataclass
class OffsetFetchRequestTopic:
    name: str = string("0+")
    partition_indexes: list[int] = array(Kind.INT32, "0+")


@dataclass
class OffsetFetchRequest:
    group_id: str = string("0+")
    topics: list[OffsetFetchRequestTopic] | None = array(OffsetFetchRequestTopic, "0+", nullable="2+")
    require_stable: bool = boolean("7+")


@dataclass
class OffsetFetchResponsePartition:
    partition_index: int = int32("0+")
    committed_offset: int = int64("0+")
    committed_leader_epoch: int = int32("5+", -1)
    metadata: str | None = string("0+", nullable="0+")
    error_code: int = int16("0+")


@dataclass
class OffsetFetchResponseTopic:
    name: str = string("0+")
    partitions: list[OffsetFetchResponsePartition] = array(OffsetFetchResponsePartition, "0+")


@dataclass
class OffsetFetchResponse:
    throttle_time_ms: int = int32("3+")
    topics: list[OffsetFetchResponseTopic] = array(OffsetFetchResponseTopic, "0+")
    error_code: int = int16("2+")


OFFSET_COMMIT = Api(
    8, "OffsetCommit", OffsetCommitRequest, OffsetCommitResponse, Versions.parse("0-8"), Versions.parse("8+")
)
OFFSET_FETCH = Api(
    9, "OffsetFetch", OffsetFetchRequest, OffsetFetchResponse, Versions.parse("0-7"), Versions.parse("6+")
)
