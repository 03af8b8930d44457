"""A cluster plan that never sits whole in one process: a manifest on the client, each broker's part on its broker.

A cluster of 50 brokers holds 10^7 segments: as one plan (``plan --scheduler``) every segment crosses to the client
and back to every worker. With ``plan --scheduler ... --manifest`` each broker's worker plans its own log dirs and
keeps the result on its own host, a columnar plan (``migrate.model.plan_columns``) beside its log dirs; the client
writes only this manifest::

    ClusterManifest
      manifest_id                   hashes everything below (an edited manifest is refused)
      cluster_id, options           every part was planned with these options, in this cluster
      brokers: BrokerPart...        per broker: its worker's host, its log dirs, where its part is on that host,
                                    the part's plan id and sha256, its totals
      estimates                     the totals over every part

``execute``, ``status``, ``verify``, ``rollback`` and ``finalize`` given a manifest send each broker a task that
reads its part there (checked against the manifest's sha256 and plan id), runs the verb over it on that host and
returns a ``PartOutcome``: totals and the first few problems, never the part's segments.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass

from migrate.codec import from_json, to_json
from migrate.errors import ModelError
from migrate.model.plan_tree import ConvertOptions, Estimates

MANIFEST_VERSION = 1
MANIFEST_KIND = "kafka-log-migrate cluster manifest"


@dataclass(frozen=True)
class BrokerPart:
    """One broker's part of a cluster plan, as the client knows it."""

    broker_id: int
    host: str  # the worker's host: every task of this part is pinned to it
    worker: str
    log_dirs: tuple[str, ...]
    path: str  # the part's columnar plan file, on the broker's host
    plan_id: str  # the part's own id: its state in its log dirs is named by it
    sha256: str  # of the part file's bytes
    file_bytes: int
    estimates: Estimates
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterManifest:
    kind: str
    version: int
    manifest_id: str
    tool: str
    created: str
    planned_on: str  # the scheduler
    cluster_id: str | None
    options: ConvertOptions
    brokers: tuple[BrokerPart, ...]
    estimates: Estimates

    def part(self, broker_id: int) -> BrokerPart:
        for b in self.brokers:
            if b.broker_id == broker_id:
                return b
        known = ", ".join(str(b.broker_id) for b in self.brokers)
        raise ModelError(f"broker {broker_id} is not in manifest {self.manifest_id} (it has {known})")


class Verb(str, enum.Enum):
    """What a manifest's brokers are asked to run over their parts."""

    EXECUTE = "execute"
    STATUS = "status"
    VERIFY = "verify"
    ROLLBACK = "rollback"
    FINALIZE = "finalize"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class PartOutcome:
    """What one broker's run over its part says, small whatever the part's size."""

    broker_id: int
    verb: Verb
    ok: bool
    partitions: int
    partitions_done: int  # migrated (execute, status), rolled back or finalized
    segments: int
    seconds: float
    problems: int  # segments refused or failed, partitions changed, stage errors
    first_problems: tuple[str, ...] = ()  # at most MAX_PROBLEMS_SHOWN
    error: str | None = None  # the part could not be run at all (unreadable, edited, another plan in the way)


MAX_PROBLEMS_SHOWN = 10


def manifest_id(manifest: ClusterManifest) -> str:
    body = to_json(manifest)
    for name in ("manifest_id", "created", "planned_on"):
        body.pop(name)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def dump_manifest_json(manifest: ClusterManifest) -> str:
    return json.dumps(to_json(manifest), indent=1) + "\n"


def is_manifest_json(data: bytes) -> bool:
    return data.lstrip()[:1] == b"{" and MANIFEST_KIND.encode() in data[:200]


def load_manifest_json(text: str, source: str = "manifest") -> ClusterManifest:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(f"{source}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("kind") != MANIFEST_KIND:
        raise ModelError(f"{source}: not a {MANIFEST_KIND}")
    if data.get("version") != MANIFEST_VERSION:
        raise ModelError(
            f"{source}: manifest version {data.get('version')!r}; this kafka-log-migrate reads version "
            f"{MANIFEST_VERSION}. Re-plan with `kafka-log-migrate plan --scheduler ... --manifest`."
        )
    manifest = from_json(ClusterManifest, data, "manifest")
    if manifest_id(manifest) != manifest.manifest_id:
        raise ModelError(
            f"{source}: manifest {manifest.manifest_id} was edited after it was made (its content hashes to "
            f"{manifest_id(manifest)}); re-plan with `kafka-log-migrate plan --scheduler ... --manifest`"
        )
    return manifest
