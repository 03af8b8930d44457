"""ListOffsets (key 2), served in versions 0-8, flexible from 6 (ListOffsetsRequest.json, ListOffsetsResponse.json).

::

    ListOffsetsRequest   replica_id => int32, isolation_level => int8 (2+)
                         topics => [name => string,
                                    partitions => [partition_index => int32,
                                                   current_leader_epoch => int32 (4+, default -1),
                                                   timestamp => int64, max_num_offsets => int32 (0 only)]]
    ListOffsetsResponse  throttle_time_ms => int32 (2+)
                         topics => [name => string,
                                    partitions => [partition_index => int32, error_code => int16,
                                                   old_style_offsets => [int64] (0 only),
                                                   timestamp => int64 (1+, default -1),
                                                   offset => int64 (1+, default -1),
                                                   leader_epoch => int32 (4+, default -1)]]

The timestamp asks for: -1 the log end offset, -2 the log start offset, -3 (7+) the record of the largest
timestamp, -4 (8+) the local log start offset (the log start offset: nothing here is tiered), or a time: the first
record at or after it.
"""

from __future__ import annotations

from dataclasses import dataclass

from migrate.serve.wire import Api, Kind, Versions, array, int8, int16, int32, int64, string

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4


@dataclass
class ListOffsetsPartition:
    partition_index: int = int32("0+")
    current_leader_epoch: int = int32("4+", -1)
    timestamp: int = int64("0+")
    max_num_offsets: int = int32("0", 1)


@dataclass
class ListOffsetsTopic:
    name: str = string("0+")
    partitions: list[ListOffsetsPartition] = array(ListOffsetsPartition, "0+")


@dataclass
class ListOffsetsRequest:
    replica_id: int = int32("0+")
    isolation_level: int = int8("2+")
    topics: list[ListOffsetsTopic] = array(ListOffsetsTopic, "0+")


@dataclass
class ListOffsetsPartitionResponse:
    partition_index: int = int32("0+")
    error_code: int = int16("0+")
    old_style_offsets: list[int] = array(Kind.INT64, "0")
    timestamp: int = int64("1+", -1)
    offset: int = int64("1+", -1)
    leader_epoch: int = int32("4+", -1)


@dataclass
class ListOffsetsTopicResponse:
    name: str = string("0+")
    partitions: list[ListOffsetsPartitionResponse] = array(ListOffsetsPartitionResponse, "0+")


@dataclass
class ListOffsetsResponse:
    throttle_time_ms: int = int32("2+")
    topics: list[ListOffsetsTopicResponse] = array(ListOffsetsTopicResponse, "0+")


API = Api(2, "ListOffsets", ListOffsetsRequest, ListOffsetsResponse, Versions.parse("0-8"), Versions.parse("6+"))
