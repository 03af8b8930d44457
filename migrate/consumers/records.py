"""What a consumer run is made of and what it is judged to be: the records a client read, the records Kafka's own
reader holds, and the verdict on one client over one log dir. Frozen dataclasses, serialised by ``migrate.codec``."""

from __future__ import annotations

import enum
import hashlib
import struct
from dataclasses import dataclass, field

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class ConsumedRecord:
    """One record as a client handed it to its application."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


@dataclass(frozen=True)
class RecordFacts:
    """One record reduced to what is compared: digests of its key, value and headers, and its timestamp; and, for the
    reference side, the codec of the batch that holds it (a client without that codec cannot read it)."""

    key: bytes | None
    value: bytes | None
    headers: bytes  # names and values
    header_names: tuple[str, ...]
    header_values: bytes  # values alone: a client that mangles names only is told apart from one that loses values
    timestamp: int | None  # None on the reference side: not compared (not known there)
    codec: str = ""

    @classmethod
    def of(
        cls, key: bytes | None, value: bytes | None, headers: Headers, timestamp: int | None, codec: str = ""
    ) -> RecordFacts:
        return cls(
            _digest(key),
            _digest(value),
            _headers_digest(headers),
            tuple(n for n, _ in headers),
            _headers_digest(tuple(("", v) for _, v in headers)),
            timestamp,
            codec,
        )


def _digest(data: bytes | None) -> bytes | None:
    return None if data is None else hashlib.blake2b(data, digest_size=16).digest()


def _headers_digest(headers: Headers) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for name, value in headers:
        raw = name.encode("utf-8", "surrogatepass")
        h.update(struct.pack(">i", len(raw)) + raw)
        h.update(b"\x01" if value is None else b"\x00" + struct.pack(">i", len(value)) + value)
    return h.digest()


class ClientKind(str, enum.Enum):
    JAVA = "java"  # Apache Kafka's KafkaConsumer (kafka-clients)
    KAFKA_PYTHON = "kafka-python"
    AIOKAFKA = "aiokafka"
    CONFLUENT = "confluent-kafka"  # librdkafka
    KAFKAJS = "kafkajs"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ClientRun:
    """What one client did with one served log dir: ``label`` is the client's own name and version, as its driver
    printed it; ``end`` why the driver stopped; ``exit`` how its process ended."""

    kind: ClientKind
    label: str
    records: int
    errors: int
    first_errors: tuple[str, ...]
    end: str
    exit: str
    seconds: float
    withheld: tuple[str, ...] = ()  # partitions not given to the client, each with the reason
    stderr: str = ""
    error_kinds: dict[str, int] = field(default_factory=dict)  # errors with their numbers taken out, and how often


class Outcome(str, enum.Enum):
    EQUAL = "equal"  # every record read, each equal to Kafka's reader
    KNOWN = "known"  # every record read; some differ only in a known, stated way of this client
    WRONG = "wrong"  # every record read, some with a key, value, header or timestamp that is not Kafka's
    LOSES = "loses"  # records lost (or handed over that are not in the log, or twice)
    UNAVAILABLE = "unavailable"  # the client could not run here

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Difference:
    partition: str
    offset: int
    what: str  # "lost", "extra", "key", "value", "headers", "timestamp", "duplicate"
    detail: str = ""
    known: str = ""  # the known exception this is, when it is one


@dataclass(frozen=True)
class ClientVerdict:
    """One client over one log dir, against Kafka's reader of the same log dir."""

    kind: ClientKind
    label: str
    log_dir: str  # what was served, in words ("legacy-logdir", "legacy-logdir converted")
    outcome: Outcome
    expected: int  # records Kafka's reader holds in the partitions given to the client
    read: int  # distinct records the client handed over
    equal: int
    lost: int
    wrong: int  # read, with a key, value, header or timestamp not Kafka's
    known: int  # differ only in a known way (each in ``differences`` with its reason)
    extra: int  # offsets Kafka's reader does not hold
    duplicates: int
    errors: int
    end: str
    exit: str
    seconds: float
    summary: str  # one line, the same on every run of the same client over the same data
    wrong_by_field: dict[str, int]
    incomplete: tuple[str, ...]  # partitions with records lost
    withheld: tuple[str, ...]
    first_errors: tuple[str, ...]
    differences: tuple[Difference, ...]  # the first few
    error_kinds: dict[str, int] = field(default_factory=dict)
