"""``rehearse --clients``: this host's consumers (confluent-kafka, kafka-python, aiokafka as installed for the tests'
Python, and the Java client from a Kafka installation's libs/) read the rehearsed broker through the read-only
endpoint before the conversion and after it, every record judged against Kafka's reader; the report carries the
clients table (terminal, JSON, HTML), and a consumer that loses a record after the conversion (a converted batch
damaged by hand between verify and clients) fails the rehearsal, with a non-zero exit code, while the rollback still
puts every original back.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from client_envs import oracle_jars
from conftest import ORACLE, have_java
from kafka_layout import make_broker_logdir

from migrate.cli import main
from migrate.commands.rehearse import report_text
from migrate.consumers.records import ClientKind, Outcome
from migrate.engines import SerialEngine
from migrate.model.plan_tree import ConvertOptions
from migrate.planning.plan import load_plan
from migrate.rehearse import driver as rehearse
from migrate.rehearse.records import RehearsalConfig, RehearsalState, StepStatus
from migrate.rehearse.report import RehearsalPaths

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

# four partitions every client reads exactly before the conversion too: the clients' failures on legacy data are
# tests/test_clients.py's; here the rehearsal's own logic is under test, and no client has to be waited out
PARTITIONS = ["plain-v0-0", "gzip-v0-0", "lz4-v1-1", "already-v2-1"]
RECORDS = 105 + 125 + 34 + 9  # Kafka's reader of the four (tests/test_clients.py counts every fixture)


def serial() -> tuple[SerialEngine, str]:
    return SerialEngine(), "active"


@pytest.fixture
def kafka_home(tmp_path: Path) -> Path:
    """A Kafka installation's layout (libs/ with kafka-clients and what it needs): the oracle's jars."""
    if not have_java():
        pytest.skip(reason="the Java client needs java and javac 17+, which are not on the PATH")
    libs = tmp_path / "kafka" / "libs"
    libs.mkdir(parents=True)
    for jar in oracle_jars().glob("*.jar"):
        name = "kafka-clients-3.9.1.jar" if jar.name == "kafka-clients.jar" else jar.name
        (libs / name).symlink_to(jar)
    return libs.parent


def config(log_dir: Path, kafka_home: Path, idle_ms: int = 3000) -> RehearsalConfig:
    return RehearsalConfig(
        log_dirs=(str(log_dir),),
        options=ConvertOptions(truncate_tail=True),
        oracle=str(ORACLE),
        clients=True,
        kafka_home=str(kafka_home),
        clients_idle_ms=idle_ms,
    )


def test_rehearse_clients_reads_the_data_before_and_after_and_reports_each_client(tmp_path, kafka_home):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    paths = RehearsalPaths.beside(tmp_path / "out" / "rehearsal.json")
    report = rehearse.start(config(log_dir, kafka_home), paths, serial)
    assert report.ok, report.verdict
    steps = {s.name: s.status for s in report.steps}
    assert steps["clients"] == StepStatus.PASSED
    assert list(steps).index("clients") == list(steps).index("verify") + 1
    before, after = report.clients_before, report.clients_after
    assert before is not None and after is not None
    assert after.reference == before.reference == "Apache Kafka (oracle, kafka-clients FileRecords)"
    kinds = {ClientKind.CONFLUENT, ClientKind.KAFKA_PYTHON, ClientKind.AIOKAFKA, ClientKind.JAVA}
    for stage in (before, after):
        assert {v.kind for v in stage.verdicts} == kinds
        for v in stage.verdicts:
            assert v.outcome == Outcome.EQUAL and v.read == v.equal == v.expected == RECORDS, v.summary
    assert any(v.label == "kafka-clients 3.9.1" for v in after.verdicts)
    text = report_text(report)
    assert "clients (records compared with Apache Kafka (oracle, kafka-clients FileRecords)):" in text
    assert f"after: all {RECORDS:,} records read, each equal to Kafka's reader" in text
    html = Path(report.html_report or "").read_text()
    assert 'id="clients"' in html and "kafka-clients 3.9.1" in html and "aiokafka 0.14.0" in html
    assert not paths.report.with_name("rehearsal.clients").exists()  # the drivers' outputs hold data: removed


def _damage_first_converted_batch(plan_path: Path, partition: str) -> Path:
    """Flip a byte in the middle of the first batch of ``partition``'s first converted segment (its compressed
    records: the batch's CRC-32C no longer holds, and what decompresses, if anything, is not the records), in place,
    its mtime put back: only a reader of the data can tell."""
    plan = load_plan(plan_path)
    part = next(p for d in plan.log_dirs for p in d.partitions if p.name == partition)
    live = Path(part.dir) / f"{part.segments[0].base_offset:020d}.log"
    st = live.stat()
    with open(live, "r+b") as f:
        head = f.read(12)
        size = struct.unpack(">i", head[8:12])[0]
        middle = 12 + 61 + (size - 61) // 2  # past the 61-byte batch header, inside the compressed records
        f.seek(middle)
        byte = f.read(1)
        f.seek(middle)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(live, ns=(st.st_atime_ns, st.st_mtime_ns))
    return live


def test_a_client_losing_a_converted_record_fails_the_rehearsal_and_its_exit_code(tmp_path, kafka_home):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    paths = RehearsalPaths.beside(tmp_path / "out" / "rehearsal.json")
    damaged: list[Path] = []

    def damage(name: str, state: RehearsalState) -> None:
        if name == "verify":
            damaged.append(_damage_first_converted_batch(paths.plan, "gzip-v0-0"))

    # a client that stops at the damage is waited out for 2 s: the records before it are read in well under that
    report = rehearse.start(config(log_dir, kafka_home, idle_ms=2000), paths, serial, after_step=damage)
    assert damaged
    assert not report.ok and report.first_failing_step == "clients", report.verdict
    steps = {s.name: s for s in report.steps}
    assert steps["clients"].status == StepStatus.FAILED and "do not read the converted data exactly" in (
        steps["clients"].message
    )
    assert steps["rollback"].status == steps["compare"].status == StepStatus.PASSED, (
        steps["rollback"].message,
        steps["compare"].message,
    )  # the originals are back
    after = report.clients_after
    assert after is not None
    for v in after.verdicts:  # each loses the record or hands over an altered one, none reads it as Kafka does
        assert v.outcome in (Outcome.LOSES, Outcome.WRONG), v.summary
        assert any(d.partition == "gzip-v0-0" for d in v.differences), v.summary
    assert main(["rehearse", "--resume", "-o", str(paths.report)]) == 1  # the command's exit code for this rehearsal
