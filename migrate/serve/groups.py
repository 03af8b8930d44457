"""The classic group protocol's membership calls: FindCoordinator (key 10, versions 0-3, flexible 3+), JoinGroup
(11, 0-7, flexible 6+), Heartbeat (12, 0-4, flexible 4+), LeaveGroup (13, 0-4, flexible 4+), SyncGroup (14, 0-5,
flexible 4+) (their *Request.json and *Response.json).

::

    FindCoordinatorRequest   key => string, key_type => int8 (1+)
    FindCoordinatorResponse  throttle_time_ms => int32 (1+), error_code => int16,
                             error_message => nullable string (1+), node_id => int32, host => string, port => int32
    JoinGroupRequest         group_id => string, session_timeout_ms => int32,
                             rebalance_timeout_ms => int32 (1+, default -1), member_id => string,
                             group_instance_id => nullable string (5+), protocol_type => string,
                             protocols => [name => string, metadata => bytes]
    JoinGroupResponse        throttle_time_ms => int32 (2+), error_code => int16, generation_id => int32 (default -1),
                             protocol_type => nullable string (7+), protocol_name => string (nullable 7+),
                             leader => string, member_id => string,
                             members => [member_id => string, group_instance_id => nullable string (5+),
                                         metadata => bytes]
    HeartbeatRequest         group_id => string, generation_id => int32, member_id => string,
                             group_instance_id => nullable string (3+)
    HeartbeatResponse        throttle_time_ms => int32 (1+), error_code => int16
    LeaveGroupRequest        group_id => string, member_id => string (0-2),
                             members => [member_id => string, group_instance_id => nullable string] (3+)
    LeaveGroupResponse       throttle_time_ms => int32 (1+), error_code => int16,
                             members => [member_id => string, group_instance_id => nullable string,
                                         error_code => int16] (3+)
    SyncGroupRequest         group_id => string, generation_id => int32, member_id => string,
                             group_instance_id => nullable string (3+), protocol_type => nullable string (5+),
                             protocol_name => nullable string (5+),
                             assignments => [member_id => string, assignment => bytes]
    SyncGroupResponse        throttle_time_ms => int32 (1+), error_code => int16,
                             protocol_type => nullable string (5+), protocol_name => nullable string (5+),
                             assignment => bytes
"""

from __future__ import annotations

from dataclasses import dataclass

from migrate.serve.wire import Api, Versions, array, bytes_, int8, int16, int32, string


@dataclass
class FindCoordinatorRequest:
    key: str = string("0+")
    key_type: int = int8("1+")


@dataclass
class FindCoordinatorResponse:
    throttle_time_ms: int = int32("1+")
    error_code: int = int16("0+")
    error_message: str | None = string("1+", None, nullable="1+")
    node_id: int = int32("0+")
    host: str = string("0+")
    port: int = int32("0+")


@dataclass
class JoinGroupRequestProtocol:
    name: str = string("0+")
    metadata: bytes = bytes_("0+")


@dataclass
class JoinGroupRequest:
    group_id: str = string("0+")
    session_timeout_ms: int = int32("0+")
    rebalance_timeout_ms: int = int32("1+", -1)
    member_id: str = string("0+")
    group_instance_id: str | None = string("5+", None, nullable="5+")
    protocol_type: str = string("0+")
    protocols: list[JoinGroupRequestProtocol] = array(JoinGroupRequestProtocol, "0+")


@dataclass
class JoinGroupResponseMember:
    member_id: str = string("0+")
    group_instance_id: str | None = string("5+", None, nullable="5+")
    metadata: bytes = bytes_("0+")


@dataclass
class JoinGroupResponse:
    throttle_time_ms: int = int32("2+")
    error_code: int = int16("0+")
    generation_id: int = int32("0+", -1)
    protocol_type: str | None = string("7+", None, nullable="7+")
    protocol_name: str | None = string("0+", nullable="7+")
    leader: str = string("0+")
    member_id: str = string("0+")
    members: list[JoinGroupResponseMember] = array(JoinGroupResponseMember, "0+")


@dataclass
class HeartbeatRequest:
    group_id: str = string("0+")
    generation_id: int = int32("0+")
    member_id: str = string("0+")
    group_instance_id: str | None = string("3+", None, nullable="3+")


@dataclass
class HeartbeatResponse:
    throttle_time_ms: int = int32("1+")
    error_code: int = int16("0+")


@dataclass
class MemberIdentity:
    member_id: str = string("3+")
    group_instance_id: str | None = string("3+", None, nullable="3+")


@dataclass
class LeaveGroupRequest:
    group_id: str = string("0+")
    member_id: str = string("0-2")
    members: list[MemberIdentity] = array(MemberIdentity, "3+")


@dataclass
class MemberResponse:
    member_id: str = string("3+")
    group_instance_id: str | None = string("3+", None, nullable="3+")
    error_code: int = int16("3+")


@dataclass
class LeaveGroupResponse:
    throttle_time_ms: int = int32("1+")
    error_code: int = int16("0+")
    members: list[MemberResponse] = array(MemberResponse, "3+")


@dataclass
class SyncGroupRequestAssignment:
    member_id: str = string("0+")
    assignment: bytes = bytes_("0+")


@dataclass
class SyncGroupRequest:
    group_id: str = string("0+")
    generation_id: int = int32("0+")
    member_id: str = string("0+")
    group_instance_id: str | None = string("3+", None, nullable="3+")
    protocol_type: str | None = string("5+", None, nullable="5+")
    protocol_name: str | None = string("5+", None, nullable="5+")
    assignments: list[SyncGroupRequestAssignment] = array(SyncGroupRequestAssignment, "0+")


@dataclass
class SyncGroupResponse:
    throttle_time_ms: int = int32("1+")
    error_code: int = int16("0+")
    protocol_type: str | None = string("5+", None, nullable="5+")
    protocol_name: str | None = string("5+", None, nullable="5+")
    assignment: bytes = bytes_("0+")


FIND_COORDINATOR = Api(
    10, "FindCoordinator", FindCoordinatorRequest, FindCoordinatorResponse, Versions.parse("0-3"), Versions.parse("3+")
)
JOIN_GROUP = Api(11, "JoinGroup", JoinGroupRequest, JoinGroupResponse, Versions.parse("0-7"), Versions.parse("6+"))
HEARTBEAT = Api(12, "Heartbeat", HeartbeatRequest, HeartbeatResponse, Versions.parse("0-4"), Versions.parse("4+"))
LEAVE_GROUP = Api(13, "LeaveGroup", LeaveGroupRequest, LeaveGroupResponse, Versions.parse("0-4"), Versions.parse("4+"))
SYNC_GROUP = Api(14, "SyncGroup", SyncGroupRequest, SyncGroupResponse, Versions.parse("0-5"), Versions.parse("4+"))
