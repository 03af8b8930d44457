"""``rehearse --clients``: the consumers installed on the canary's host read the rehearsed data through the read-only
endpoint (``migrate.serve``) before the conversion and after it, each judged record by record against Kafka's own
reader of the same files (``migrate.consumers``).

Which consumers: confluent-kafka (with its librdkafka), kafka-python and aiokafka as installed for this tool's own
Python and for each ``--client-python`` (the interpreter of an application's venv), and Apache Kafka's Java
consumer from the operator's own Kafka installation (``--kafka-home``; it needs a JDK's javac to build its small
driver once). Kafka's reader is the oracle when it can run here, else this tool's own reader (``verify`` holds the
two to each other on every fixture). After the conversion, a record must hold what Kafka's reader read of the
originals (offset, key, value, headers: the reference taken before, kept beside the report as digests) and the
timestamp Kafka's reader reads of the converted files (v0 records gain one under ``--timestamps mtime``). A client
that is not installed is listed as not run, never a failure; after the conversion, any client that loses or alters
a record fails the step.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path

from migrate.consumers.clients import (
    Client,
    ClientUnavailable,
    default_cache,
    java_client,
    kafka_jars,
    python_client,
)
from migrate.consumers.expected import Expected, ReaderFailed, expected_from_oracle, expected_from_reader
from migrate.consumers.measure import measure
from migrate.consumers.records import ClientKind, ClientVerdict, Outcome, RecordFacts
from migrate.rehearse.readers import ORACLE_READER, oracle_problem, partition_dirs
from migrate.rehearse.records import ClientsReport, RehearsalConfig

OWN_READER = "kafka-log-migrate's reader (migrate.format)"
DEADLINE_MS = 6 * 3600 * 1000
PYTHON_KINDS = (ClientKind.CONFLUENT, ClientKind.KAFKA_PYTHON, ClientKind.AIOKAFKA)


def installed_clients(config: RehearsalConfig) -> tuple[list[Client], list[str]]:
    """The consumers that can run on this host, and a line for each that cannot (what is missing)."""
    found: list[Client] = []
    missing: list[str] = []
    for python in dict.fromkeys((sys.executable, *config.client_pythons)):
        for kind in PYTHON_KINDS:
            try:
                found.append(python_client(kind, python))
            except ClientUnavailable as exc:
                missing.append(str(exc))
    if not config.kafka_home:
        missing.append("the Java client: no --kafka-home (the directory of this host's Kafka installation) given")
    else:
        try:
            found.append(java_client(kafka_jars(config.kafka_home), default_cache()))
        except ClientUnavailable as exc:
            missing.append(f"the Java client: {exc}")
    return found, missing


def kafkas_records(config: RehearsalConfig, dirs: list[Path]) -> tuple[str, Expected]:
    """(which reader, its records) of the partition dirs: the oracle when it runs here, else this tool's reader."""
    if oracle_problem(config.oracle) is None:
        try:
            return ORACLE_READER, expected_from_oracle(config.oracle, dirs)
        except ReaderFailed:
            pass
    return OWN_READER, expected_from_reader(dirs)


def save_reference(expected: Expected, path: Path) -> None:
    """Kafka's reader of the originals, as the digests the judge compares (no key or value itself is kept)."""
    with open(path, "w", encoding="utf-8") as f:
        for (topic, partition), records in sorted(expected.items()):
            f.write(json.dumps({"partition": [topic, partition]}) + "\n")
            for offset, r in sorted(records.items()):
                row: list[object] = [offset, *(None if d is None else d.hex() for d in (r.key, r.value))]
                row += [r.headers.hex(), list(r.header_names), r.header_values.hex(), r.timestamp, r.codec]
                f.write(json.dumps(row) + "\n")


def load_reference(path: Path) -> Expected:
    out: Expected = {}
    current: dict[int, RecordFacts] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if isinstance(row, dict):
                current = out.setdefault((row["partition"][0], int(row["partition"][1])), {})
                continue
            offset, key, value, headers, names, values, timestamp, codec = row
            current[int(offset)] = RecordFacts(
                None if key is None else bytes.fromhex(key),
                None if value is None else bytes.fromhex(value),
                bytes.fromhex(headers),
                tuple(names),
                bytes.fromhex(values),
                timestamp,
                codec,
            )
    return out


def after_reference(before: Expected, after: Expected) -> Expected:
    """What a consumer must read of the converted data: each record of the originals as Kafka read it, with the
    timestamp Kafka reads of the converted files (none compared where Kafka's reader reads no such record there:
    a damaged output is then judged on its content alone)."""
    merged: Expected = dict(after)
    for key, records in before.items():
        now = after.get(key, {})
        merged[key] = {
            o: dataclasses.replace(
                r, timestamp=now[o].timestamp if o in now else None, codec=now[o].codec if o in now else r.codec
            )
            for o, r in records.items()
        }
    return merged


def consume(
    config: RehearsalConfig, targets: tuple[str, ...], stage: str, work: Path, reference: Path
) -> ClientsReport:
    """Every installed client over ``targets`` served as one broker; ``stage`` names the data ("before" writes the
    reference of the originals to ``reference``, "after" judges against it)."""
    topic_re = re.compile(config.topics) if config.topics else None
    dirs = [d for d in partition_dirs(targets) if topic_re is None or topic_re.fullmatch(d.name.rpartition("-")[0])]
    reader, expected = kafkas_records(config, dirs)
    if stage == "before":
        save_reference(expected, reference)
    elif reference.exists():
        expected = after_reference(load_reference(reference), expected)
    clients, missing = installed_clients(config)
    work.mkdir(parents=True, exist_ok=True)
    verdicts = []
    try:
        for client in clients:
            verdicts.append(
                measure(
                    client,
                    [Path(t) for t in targets],
                    expected,
                    stage,
                    work,
                    idle_ms=config.clients_idle_ms,
                    deadline_ms=DEADLINE_MS,
                    keep_output=False,
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the drivers' outputs hold the data itself: never left behind
    return ClientsReport(reader, tuple(verdicts), tuple(missing))


def failures_after(after: ClientsReport) -> list[ClientVerdict]:
    """The clients that did not read every converted record exactly."""
    return [v for v in after.verdicts if v.outcome not in (Outcome.EQUAL, Outcome.KNOWN, Outcome.UNAVAILABLE)]
