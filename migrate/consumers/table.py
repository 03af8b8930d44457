"""The clients table: one row per client (library and version), one column per log dir served (before and after
the conversion), each cell in the words of ``judge.cell`` (the same every run) or with the run's counts
(``summary``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from migrate.consumers.judge import cell
from migrate.consumers.records import ClientKind, ClientVerdict

LIBRARY = {
    ClientKind.JAVA: "Apache Kafka's Java client (KafkaConsumer)",
    ClientKind.KAFKA_PYTHON: "kafka-python",
    ClientKind.AIOKAFKA: "aiokafka",
    ClientKind.CONFLUENT: "confluent-kafka (librdkafka)",
    ClientKind.KAFKAJS: "kafkajs",
}


def version_of(label: str) -> str:
    """The version part of a driver's label: "kafka-clients 3.9.1" -> "3.9.1", "confluent-kafka 2.10.0 (librdkafka
    2.10.0)" -> "2.10.0 (librdkafka 2.10.0)", "kafkajs 2.2.4 (codecs: ...)" -> "2.2.4"."""
    m = re.match(r"^\S+ (\S+)(?: \((librdkafka \S+)\))?", label)
    if m is None:
        return label
    return f"{m.group(1)} ({m.group(2)})" if m.group(2) else m.group(1)


@dataclass(frozen=True)
class Row:
    library: str
    version: str
    cells: tuple[str, ...]  # one per column; "" where the client was not run on that log dir


def rows(verdicts: list[ClientVerdict], columns: list[str], counts: bool = False) -> list[Row]:
    """One row per client (kind and label, in the order first met), a cell per column (a verdict's ``log_dir``);
    ``counts``: each run's summary instead of its cell."""
    text = (lambda v: v.summary) if counts else cell
    clients: list[tuple[ClientKind, str]] = []
    for v in verdicts:
        if (v.kind, v.label) not in clients:
            clients.append((v.kind, v.label))
    out = []
    for kind, label in clients:
        mine = {v.log_dir: v for v in verdicts if (v.kind, v.label) == (kind, label)}
        out.append(Row(LIBRARY[kind], version_of(label), tuple(text(mine[c]) if c in mine else "" for c in columns)))
    return out


def markdown(columns: list[str], table: list[Row]) -> str:
    lines = ["| library | version | " + " | ".join(columns) + " |", "|" + " --- |" * (2 + len(columns))]
    lines += [f"| {r.library} | {r.version} | " + " | ".join(r.cells) + " |" for r in table]
    return "\n".join(lines) + "\n"
