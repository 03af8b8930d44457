"""Produce (key 0), served in versions 3-8, never flexible here (ProduceRequest.json, ProduceResponse.json): every
request is refused, because the endpoint is read-only.

::

    ProduceRequest   transactional_id => nullable string (3+), acks => int16, timeout_ms => int32
                     topic_data => [name => string, partition_data => [index => int32, records => nullable bytes]]
    ProduceResponse  responses => [name => string,
                                   partition_responses => [index => int32, error_code => int16,
                                                           base_offset => int64,
                                                           log_append_time_ms => int64 (2+, default -1),
                                                           log_start_offset => int64 (5+, default -1),
                                                           record_errors => [batch_index => int32,
                                                                             batch_index_error_message =>
                                                                             nullable string] (8+),
                                                           error_message => nullable string (8+)]]
                     throttle_time_ms => int32 (1+)

Why it is listed at all: librdkafka enables message format v2 (and so any Fetch from version 4 on) only for a broker
that lists Produce from version 3 (its ``MsgVer2`` feature needs Produce v3 and Fetch v4). A request with acks 0
gets no response, as from a broker.
"""

from __future__ import annotations

from dataclasses import dataclass

from migrate.serve.wire import Api, Versions, array, bytes_, int16, int32, int64, string


@dataclass
class PartitionProduceData:
    index: int = int32("0+")
    records: bytes | None = bytes_("0+", nullable="0+")


@dataclass
class TopicProduceData:
    name: str = string("0+")
    partition_data: list[PartitionProduceData] = array(PartitionProduceData, "0+")


@dataclass
class ProduceRequest:
    transactional_id: str | None = string("3+", None, nullable="0+")
    acks: int = int16("0+")
    timeout_ms: int = int32("0+")
    topic_data: list[TopicProduceData] = array(TopicProduceData, "0+")


@dataclass
class BatchIndexAndErrorMessage:
    batch_index: int = int32("8+")
    batch_index_error_message: str | None = string("8+", None, nullable="8+")


@dataclass
class PartitionProduceResponse:
    index: int = int32("0+")
    error_code: int = int16("0+")
    base_offset: int = int64("0+", -1)
    log_append_time_ms: int = int64("2+", -1)
    log_start_offset: int = int64("5+", -1)
    record_errors: list[BatchIndexAndErrorMessage] = array(BatchIndexAndErrorMessage, "8+")
    error_message: str | None = string("8+", None, nullable="8+")


@dataclass
class TopicProduceResponse:
    name: str = string("0+")
    partition_responses: list[PartitionProduceResponse] = array(PartitionProduceResponse, "0+")


@dataclass
class ProduceResponse:
    responses: list[TopicProduceResponse] = array(TopicProduceResponse, "0+")
    throttle_time_ms: int = int32("1+")


API = Api(0, "Produce", ProduceRequest, ProduceResponse, Versions.parse("3-8"), Versions.parse("9+"))
