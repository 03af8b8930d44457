"""What the endpoint answers to each request: one function per API, over the served log and the coordinator.

A request frame goes in, a response frame comes out: or NO_REPLY (a produce with acks 0), or None: the connection
is closed, as a broker closes it on a request it cannot parse or an API or version it does not serve.

Fetch follows ``ReplicaManager.readFromLog`` of a consumer's fetch: partitions in request order, each read at
most its ``partition_max_bytes`` and what is left of the response's ``max_bytes``, the first partition that returns
data returning its whole first entry (KIP-74); no fetch sessions (every response says session 0, so clients send
full fetches); and when no partition has data, the answer waits ``max_wait_ms`` (the log is not growing: nothing
would come sooner).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from migrate.errors import LocatedError
from migrate.serve import api_versions, fetch, groups, list_offsets, metadata, offsets, produce
from migrate.serve.coordinator import Commit, Coordinator
from migrate.serve.header import API_VERSIONS_KEY, parse_request_header, peek_api, response_frame
from migrate.serve.log import OffsetOutOfRange, ServedLog, ServedPartition
from migrate.serve.wire import Api, WireError, decode, encode

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
COORDINATOR_NOT_AVAILABLE = 15
UNSUPPORTED_VERSION = 35
FETCH_SESSION_ID_NOT_FOUND = 70
UNKNOWN_TOPIC_ID = 100
TOPIC_AUTHORIZATION_FAILED = 29
NO_REPLY = b""  # what ``answer`` returns for a request that gets no response (a produce with acks 0)
READ_COMMITTED = 1

SERVED: dict[int, Api] = {
    api.key: api
    for api in (
        produce.API,
        fetch.API,
        list_offsets.API,
        metadata.API,
        offsets.OFFSET_COMMIT,
        offsets.OFFSET_FETCH,
        groups.FIND_COORDINATOR,
        groups.JOIN_GROUP,
        groups.HEARTBEAT,
        groups.LEAVE_GROUP,
        groups.SYNC_GROUP,
        api_versions.API,
    )
}


@dataclass
class Responder:
    log: ServedLog
    host: str
    port: int
    max_wait_cap_ms: int = 30_000  # a fetch with nothing to return waits its max_wait_ms, up to this
    closing: threading.Event = field(default_factory=threading.Event)
    coordinator: Coordinator = field(default_factory=Coordinator)
    counts: Counter[str] = field(default_factory=Counter)  # requests answered, by API name
    on_note: Callable[[str], None] | None = None

    def note(self, text: str) -> None:
        if self.on_note is not None:
            self.on_note(text)

    def answer(self, frame: bytes) -> bytes | None:
        key, version, correlation = peek_api(frame)
        api = SERVED.get(key)
        if api is None:
            self.note(f"API key {key} (version {version}) is not served: connection closed")
            return None
        if key == API_VERSIONS_KEY and version not in api.served:
            self.counts["ApiVersions"] += 1
            body = api_versions.ApiVersionsResponse(UNSUPPORTED_VERSION, self.api_keys())
            return response_frame(correlation, encode(body, 0, False), flexible_header=False)
        if version not in api.served:
            self.note(f"{api.name} version {version} is not served ({api.served}): connection closed")
            return None
        flexible = version in api.flexible
        try:
            header = parse_request_header(frame, flexible)
            request, _ = decode(api.request, frame, version, flexible, header.size)
        except WireError as exc:
            self.note(f"{api.name} v{version} request does not parse ({exc}): connection closed")
            return None
        handler: Callable[[Any, int], Any] = getattr(self, f"_{api.name}")
        response = handler(request, version)
        self.counts[api.name] += 1
        if response is None:
            return NO_REPLY
        return response_frame(
            correlation, encode(response, version, flexible), flexible_header=flexible and key != API_VERSIONS_KEY
        )

    def api_keys(self) -> list[api_versions.ApiVersion]:
        return [api_versions.ApiVersion(a.key, a.served.low, a.served.high) for a in SERVED.values()]

    # --- the APIs ---------------------------------------------------------------------------------------------

    def _ApiVersions(self, request: api_versions.ApiVersionsRequest, version: int) -> Any:
        return api_versions.ApiVersionsResponse(NONE, self.api_keys())

    def _Produce(self, request: produce.ProduceRequest, version: int) -> Any:
        self.note(
            f"a produce request to {', '.join(t.name for t in request.topic_data)} refused: this endpoint is read-only"
        )
        if request.acks == 0:
            return None
        refused = "kafka-log-migrate serve is read-only: it serves log dirs to consumers and takes no writes"
        return produce.ProduceResponse(
            [
                produce.TopicProduceResponse(
                    t.name,
                    [
                        produce.PartitionProduceResponse(p.index, TOPIC_AUTHORIZATION_FAILED, error_message=refused)
                        for p in t.partition_data
                    ],
                )
                for t in request.topic_data
            ]
        )

    def _Metadata(self, request: metadata.MetadataRequest, version: int) -> Any:
        topics = self.log.topics()
        by_id = {parts[0].topic_id: name for name, parts in topics.items()}
        wanted: list[tuple[str | None, bytes]]
        if request.topics is None or (version == 0 and not request.topics):
            wanted = [(name, parts[0].topic_id) for name, parts in topics.items()]
        else:
            wanted = [(t.name if t.name is not None else by_id.get(t.topic_id), t.topic_id) for t in request.topics]
        out = []
        node = self.log.node_id
        for name, topic_id in wanted:
            parts = topics.get(name) if name is not None else None
            if parts is None:
                out.append(metadata.MetadataResponseTopic(UNKNOWN_TOPIC_OR_PARTITION, name, topic_id))
                continue
            # a topic's partitions are 0..N-1 for every client (librdkafka indexes them so): those of other brokers,
            # not in the served log dirs, are listed as having no leader here
            here = {p.partition: p for p in parts}
            listed = []
            for i in range(max(here) + 1):
                p = here.get(i)
                listed.append(
                    metadata.MetadataResponsePartition(NONE, i, node, p.leader_epoch, [node], [node], [])
                    if p is not None
                    else metadata.MetadataResponsePartition(LEADER_NOT_AVAILABLE, i, -1, -1, [], [], [])
                )
            out.append(metadata.MetadataResponseTopic(NONE, name, parts[0].topic_id, False, listed))
        return metadata.MetadataResponse(
            0, [metadata.MetadataResponseBroker(node, self.host, self.port)], self.log.cluster_id, node, out
        )

    def _ListOffsets(self, request: list_offsets.ListOffsetsRequest, version: int) -> Any:
        topics = []
        for t in request.topics:
            answers = []
            for p in t.partitions:
                served = self.log.partitions.get((t.name, p.partition_index))
                if served is None:
                    answers.append(
                        list_offsets.ListOffsetsPartitionResponse(p.partition_index, UNKNOWN_TOPIC_OR_PARTITION)
                    )
                    continue
                try:
                    found = self._offset_for(served, p.timestamp)
                except LocatedError as exc:
                    self.note(f"{served.dir}: ListOffsets at timestamp {p.timestamp}: {exc}")
                    answers.append(list_offsets.ListOffsetsPartitionResponse(p.partition_index, CORRUPT_MESSAGE))
                    continue
                offset, timestamp = found if found is not None else (-1, -1)
                answers.append(
                    list_offsets.ListOffsetsPartitionResponse(
                        p.partition_index, NONE, [offset] if offset >= 0 else [], timestamp, offset, served.leader_epoch
                    )
                )
            topics.append(list_offsets.ListOffsetsTopicResponse(t.name, answers))
        return list_offsets.ListOffsetsResponse(0, topics)

    @staticmethod
    def _offset_for(served: ServedPartition, timestamp: int) -> tuple[int, int] | None:
        if timestamp == list_offsets.LATEST:
            return served.log_end_offset, -1
        if timestamp in (list_offsets.EARLIEST, list_offsets.EARLIEST_LOCAL):
            return served.log_start_offset, -1
        if timestamp == list_offsets.MAX_TIMESTAMP:
            return served.offset_of_max_timestamp()
        return served.offset_for_timestamp(timestamp)

    def _Fetch(self, request: fetch.FetchRequest, version: int) -> Any:
        if request.session_id != 0:  # no session was ever created: the client starts over with a full fetch
            return fetch.FetchResponse(0, FETCH_SESSION_ID_NOT_FOUND, 0, [])
        by_id = {parts[0].topic_id: name for name, parts in self.log.topics().items()}
        limit = request.max_bytes
        min_one = True
        answered = []
        for t in request.topics:
            name = t.topic if version <= 12 else by_id.get(t.topic_id)
            partitions = []
            for p in t.partitions:
                served = self.log.partitions.get((name, p.partition)) if name is not None else None
                if served is None:
                    unknown = UNKNOWN_TOPIC_OR_PARTITION if version <= 12 or name is not None else UNKNOWN_TOPIC_ID
                    partitions.append(fetch.PartitionData(p.partition, unknown, -1, -1, -1, records=b""))
                    continue
                try:
                    data = served.read(p.fetch_offset, min(p.partition_max_bytes, limit), min_one)
                    error = NONE
                except OffsetOutOfRange as exc:
                    self.note(f"{served.topic}-{served.partition}: fetch at {exc}")
                    data, error = b"", OFFSET_OUT_OF_RANGE
                if data:
                    min_one = False
                    limit = max(0, limit - len(data))
                end = served.log_end_offset
                partitions.append(
                    fetch.PartitionData(
                        p.partition,
                        error,
                        end if error == NONE else -1,
                        end if error == NONE else -1,
                        served.log_start_offset if error == NONE else -1,
                        aborted_transactions=[] if request.isolation_level == READ_COMMITTED else None,
                        records=data,
                    )
                )
            answered.append(fetch.FetchableTopicResponse(t.topic, t.topic_id, partitions))
        if min_one and request.max_wait_ms > 0 and request.min_bytes > 0:
            self.closing.wait(min(request.max_wait_ms, self.max_wait_cap_ms) / 1000)
        return fetch.FetchResponse(0, NONE, 0, answered)

    def _FindCoordinator(self, request: groups.FindCoordinatorRequest, version: int) -> Any:
        if request.key_type != 0:  # transactions: no transaction coordinator here
            return groups.FindCoordinatorResponse(
                0, COORDINATOR_NOT_AVAILABLE, "no transaction coordinator: this endpoint serves reads", -1, "", -1
            )
        return groups.FindCoordinatorResponse(0, NONE, None, self.log.node_id, self.host, self.port)

    def _JoinGroup(self, request: groups.JoinGroupRequest, version: int) -> Any:
        joined = self.coordinator.join(
            request.group_id,
            request.member_id,
            request.group_instance_id,
            request.protocol_type,
            [(p.name, p.metadata) for p in request.protocols],
            request.session_timeout_ms,
        )
        m = joined.member
        if m is None:
            return groups.JoinGroupResponse(
                0, joined.error, -1, None, "" if version < 7 else None, "", request.member_id
            )
        return groups.JoinGroupResponse(
            0,
            NONE,
            joined.generation,
            m.protocol_type,
            m.protocol_name,
            m.member_id,
            m.member_id,
            [groups.JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata)],
        )

    def _SyncGroup(self, request: groups.SyncGroupRequest, version: int) -> Any:
        error, member = self.coordinator.sync(
            request.group_id,
            request.member_id,
            request.generation_id,
            {a.member_id: a.assignment for a in request.assignments},
        )
        return groups.SyncGroupResponse(
            0, error, member.protocol_type or None, member.protocol_name or None, member.assignment
        )

    def _Heartbeat(self, request: groups.HeartbeatRequest, version: int) -> Any:
        return groups.HeartbeatResponse(
            0, self.coordinator.check(request.group_id, request.member_id, request.generation_id)
        )

    def _LeaveGroup(self, request: groups.LeaveGroupRequest, version: int) -> Any:
        if version < 3:
            return groups.LeaveGroupResponse(0, self.coordinator.leave(request.group_id, request.member_id))
        members = [
            groups.MemberResponse(
                m.member_id, m.group_instance_id, self.coordinator.leave(request.group_id, m.member_id)
            )
            for m in request.members
        ]
        return groups.LeaveGroupResponse(0, NONE, members)

    def _OffsetCommit(self, request: offsets.OffsetCommitRequest, version: int) -> Any:
        commits = {
            (t.name, p.partition_index): Commit(p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
            for t in request.topics
            for p in t.partitions
        }
        error = self.coordinator.commit(
            request.group_id, request.member_id, request.generation_id_or_member_epoch, commits
        )
        return offsets.OffsetCommitResponse(
            0,
            [
                offsets.OffsetCommitResponseTopic(
                    t.name, [offsets.OffsetCommitResponsePartition(p.partition_index, error) for p in t.partitions]
                )
                for t in request.topics
            ],
        )

    def _OffsetFetch(self, request: offsets.OffsetFetchRequest, version: int) -> Any:
        committed = self.coordinator.committed(request.group_id)
        if request.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(committed):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: t.partition_indexes for t in request.topics}
        topics = []
        for name, indexes in wanted.items():
            parts = []
            for i in indexes:
                c = committed.get((name, i))
                parts.append(
                    offsets.OffsetFetchResponsePartition(i, c.offset, c.leader_epoch, c.metadata, NONE)
                    if c is not None
                    else offsets.OffsetFetchResponsePartition(i, -1, -1, "", NONE)
                )
            topics.append(offsets.OffsetFetchResponseTopic(name, parts))
        return offsets.OffsetFetchResponse(0, topics, NONE)
