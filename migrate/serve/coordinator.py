"""The least group coordinator a consumer that subscribes (kafkajs always does) needs: groups of one member each.

What it keeps, in memory only (nothing is written anywhere: the served log dirs stay as they are, and a restart
forgets every group and commit):

- per group, its one member: the member id given at JoinGroup, its protocol (the member's first choice: with one
  member there is nothing to agree on), its generation, its session timeout and when it was last heard from, and
  the assignment the member (its own leader) sent with SyncGroup;
- per group, the committed offsets (OffsetCommit), returned by OffsetFetch.

A second member joining a group whose member is alive (heard from within its session timeout) is refused with
GROUP_MAX_SIZE_REACHED: give each consumer its own group id, or use manual assignment where the client allows it.
A member that stopped heartbeating for its session timeout is replaced by the next one to join. No rebalance is ever
needed, so REBALANCE_IN_PROGRESS is never sent.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

# Kafka's error codes (org.apache.kafka.common.protocol.Errors) this coordinator answers with
NONE = 0
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
INCONSISTENT_GROUP_PROTOCOL = 23
GROUP_MAX_SIZE_REACHED = 81


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocol_name: str
    metadata: bytes
    session_timeout_ms: int
    heard: float  # time.monotonic() of its last JoinGroup, SyncGroup, Heartbeat or OffsetCommit
    assignment: bytes = b""

    def alive(self, now: float) -> bool:
        return now - self.heard <= self.session_timeout_ms / 1000


@dataclass(frozen=True)
class Joined:
    error: int
    generation: int = -1
    member: Member | None = None


@dataclass(frozen=True)
class Commit:
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass
class Group:
    generation: int = 0
    member: Member | None = None
    offsets: dict[tuple[str, int], Commit] = field(default_factory=dict)


class Coordinator:
    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self._lock = threading.Lock()

    def _group(self, group_id: str) -> Group:
        return self.groups.setdefault(group_id, Group())

    def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
    ) -> Joined:
        now = time.monotonic()
        with self._lock:
            group = self._group(group_id)
            current = group.member
            if current is not None and current.member_id != member_id and current.alive(now):
                return Joined(GROUP_MAX_SIZE_REACHED)
            if not protocols or (current is not None and current.protocol_type != protocol_type and current.alive(now)):
                return Joined(INCONSISTENT_GROUP_PROTOCOL)
            name, metadata = protocols[0]
            group.generation += 1
            group.member = Member(
                member_id or f"{group_instance_id or 'member'}-{uuid.uuid4()}",
                group_instance_id,
                protocol_type,
                name,
                metadata,
                max(session_timeout_ms, 1000),
                now,
            )
            return Joined(NONE, group.generation, group.member)

    def check(self, group_id: str, member_id: str, generation: int) -> int:
        """The error for a call of ``member_id`` in ``generation`` (NONE when it is the group's member), and the
        member heard from."""
        with self._lock:
            member = self._group(group_id).member
            if member is None or member.member_id != member_id:
                return UNKNOWN_MEMBER_ID
            if generation != self.groups[group_id].generation:
                return ILLEGAL_GENERATION
            member.heard = time.monotonic()
            return NONE

    def sync(self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes]) -> tuple[int, Member]:
        error = self.check(group_id, member_id, generation)
        with self._lock:
            member = self._group(group_id).member
            if error or member is None:
                return error or UNKNOWN_MEMBER_ID, Member(member_id, None, "", "", b"", 0, 0.0)
            member.assignment = assignments.get(member_id, member.assignment)
            return NONE, member

    def leave(self, group_id: str, member_id: str) -> int:
        with self._lock:
            group = self._group(group_id)
            if group.member is None or group.member.member_id != member_id:
                return UNKNOWN_MEMBER_ID
            group.member = None
            return NONE

    def commit(self, group_id: str, member_id: str, generation: int, offsets: dict[tuple[str, int], Commit]) -> int:
        """Committed offsets are taken from the group's member, or from a consumer outside any group (generation -1,
        no member id: manual assignment with commits, as Kafka allows)."""
        if generation >= 0 or member_id:
            error = self.check(group_id, member_id, generation)
            if error:
                return error
        with self._lock:
            self._group(group_id).offsets.update(offsets)
        return NONE

    def committed(self, group_id: str) -> dict[tuple[str, int], Commit]:
        with self._lock:
            return dict(self._group(group_id).offsets)
