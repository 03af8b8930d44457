"""Real consumers read every fixture log dir through the read-only endpoint (``migrate.serve``), before and after
kafka-log-migrate converts a copy of it, and every record they hand over (offset, key, value, headers, timestamp) is
compared with Apache Kafka's own reader of the same files (the oracle's ``dump``).

The clients: Apache Kafka's Java KafkaConsumer (the kafka-clients jar the oracle fetched; the driver compiled with
javac here), kafka-python, aiokafka, confluent-kafka at the test extra's version and at an affected one (its own
venv, cached outside the repository), and kafkajs (npm, cached likewise). Each runs once per log dir (module-scoped,
one xdist worker), about a second each; a client that stops making progress is given up on after ``IDLE_MS``.

What is asserted is what is true today: on the legacy data the affected versions lose or alter records (``LEGACY``:
the reason operators convert; a test fails, saying so, the day a client reads them exactly), and on the converted
data every client reads every record exactly. The README's clients table is this module's measurement: a test
fails, with the command that rewrites it, when the README's copy differs.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from client_envs import Unavailable, confluent_python, kafkajs_modules, oracle_jars
from conftest import FIXTURES, LEGACY_LOGDIR, ORACLE, REAL_BROKER, REPO, copy_logdir

from migrate.cli import main
from migrate.consumers.clients import Client, ClientUnavailable, java_client, kafkajs_client, python_client
from migrate.consumers.expected import Expected, expected_from_oracle
from migrate.consumers.measure import measure
from migrate.consumers.records import ClientKind, ClientVerdict, Outcome
from migrate.consumers.table import markdown, rows
from migrate.kafka.layout import inspect_log_dir

pytestmark = [pytest.mark.oracle, pytest.mark.slow, pytest.mark.xdist_group("clients")]

IDLE_MS = 4000  # a client that hands over nothing and moves no position for this long has stopped
SOURCES = {
    "legacy-logdir": (LEGACY_LOGDIR, FIXTURES / "mtimes.json"),
    "real-broker": (REAL_BROKER / "logdir", REAL_BROKER / "mtimes.json"),
}
CLIENTS = ("java", "kafka-python", "aiokafka", "confluent-kafka", "confluent-kafka-affected", "kafkajs")
README_START = "<!-- clients table: written by tests/test_clients.py from its measurement; do not edit by hand -->"
README_END = "<!-- end of clients table -->"
WRITE_ENV = "KAFKA_LOG_MIGRATE_WRITE_CLIENTS_TABLE"
REGENERATE = f"{WRITE_ENV}=1 python -m pytest -q tests/test_clients.py -k readme"


@dataclass(frozen=True)
class Served:
    log_dir: Path
    expected: Expected


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, oracle: object) -> dict[tuple[str, bool], Served]:
    """Every fixture log dir as a copy (fixture mtimes restored), and a second copy converted by kafka-log-migrate's
    own plan and execute; each with Kafka's reader of it."""
    base = tmp_path_factory.mktemp("clients")
    out = {}
    for name, (src, manifest) in SOURCES.items():
        legacy = copy_logdir(src, base / name, manifest)
        converted = copy_logdir(src, base / f"{name}-converted", manifest)
        plan = base / f"{name}.plan.json"
        assert main(["plan", "--log-dirs", str(converted), "-o", str(plan), "--allow-unclean", "--truncate-tail"]) == 0
        assert main(["execute", "--plan", str(plan), "--engine", "serial"]) == 0
        for d, conv in ((legacy, False), (converted, True)):
            dirs = [p.path for p in inspect_log_dir(d).partitions]
            out[(name, conv)] = Served(d, expected_from_oracle(ORACLE, dirs))
    return out


def _client(name: str) -> Client:
    if name == "java":
        return java_client(oracle_jars())
    if name == "kafkajs":
        return kafkajs_client(kafkajs_modules())
    if name == "confluent-kafka-affected":
        return python_client(ClientKind.CONFLUENT, confluent_python())
    return python_client(ClientKind(name))


@pytest.fixture(scope="module")
def clients() -> dict[str, Client | str]:
    """Each client, or why it cannot run here."""
    out: dict[str, Client | str] = {}
    for name in CLIENTS:
        try:
            out[name] = _client(name)
        except (Unavailable, ClientUnavailable) as exc:
            out[name] = str(exc)
    return out


@pytest.fixture(scope="module")
def verdict(
    served: dict[tuple[str, bool], Served], clients: dict[str, Client | str], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str, str, bool], ClientVerdict]:
    """``verdict(client, fixture, converted)``: measured once per client and log dir, on first use."""
    work = tmp_path_factory.mktemp("client-runs")
    cache: dict[tuple[str, str, bool], ClientVerdict] = {}

    def get(name: str, fixture: str, converted: bool) -> ClientVerdict:
        client = clients[name]
        if isinstance(client, str):
            pytest.skip(reason=f"{name} cannot run here: {client}")
        key = (name, fixture, converted)
        if key not in cache:
            s = served[(fixture, converted)]
            label = f"{fixture}{' converted' if converted else ''}"
            cache[key] = measure(client, [s.log_dir], s.expected, label, work, idle_ms=IDLE_MS)
        return cache[key]

    return get


def _explain(v: ClientVerdict) -> str:
    lines = [f"{v.label} on {v.log_dir}: {v.summary}", f"  stopped: {v.end}; {v.exit}"]
    lines += [f"  {d.partition} offset {d.offset}: {d.what} {d.detail} {d.known}" for d in v.differences[:10]]
    lines += [f"  error: {e}" for e in v.first_errors[:3]]
    return "\n".join(lines)


# --- after the conversion: every client reads every record exactly -----------------------------------------------


@pytest.mark.parametrize("fixture", list(SOURCES))
@pytest.mark.parametrize("name", CLIENTS)
def test_every_client_reads_every_converted_record_exactly(verdict, served, name, fixture):
    v = verdict(name, fixture, True)
    assert v.outcome in (Outcome.EQUAL, Outcome.KNOWN), _explain(v)
    assert v.read == v.expected == v.equal + v.known > 0, _explain(v)
    assert all(d.known for d in v.differences), _explain(v)
    held = served[(fixture, True)].expected
    given = sum(len(r) for (t, p), r in held.items() if not any(w.startswith(f"{t}-{p} ") for w in v.withheld))
    assert v.expected == given  # nothing but the withheld partitions left out, and those only for kafkajs
    if name == "kafkajs":
        assert all("zstd" in w for w in v.withheld)
    else:
        assert v.withheld == ()


# --- before: the affected versions lose or alter records on the legacy data ----------------------------------------


@dataclass(frozen=True)
class Legacy:
    """What a client does with a legacy fixture today, and what the test checks of it."""

    outcome: Outcome
    check: Callable[[ClientVerdict], bool] = lambda v: True
    why: str = ""


def _lz4_v0_partitions_incomplete(v: ClientVerdict) -> bool:
    broken = {i.split(" ")[0] for i in v.incomplete}
    return {"lz4-v0-0", "mixed-v0-v1-1"} <= broken and "UnsupportedCodecError" in " ".join(v.error_kinds)


LEGACY: dict[tuple[str, str], Legacy] = {
    ("confluent-kafka-affected", "legacy-logdir"): Legacy(
        Outcome.LOSES,
        lambda v: (
            v.exit == "killed by SIGABRT" and any("Unsupported Message(Set) MagicByte" in e for e in v.error_kinds)
        ),
        "librdkafka 2.10.0 misreads legacy message sets (confluentinc/librdkafka#5504, #5549), then aborts "
        "(its rd_slice_narrow_copy assertion)",
    ),
    ("confluent-kafka-affected", "real-broker"): Legacy(
        Outcome.LOSES, lambda v: v.read == 0, "librdkafka 2.10.0 never gets past the first legacy message set"
    ),
    ("aiokafka", "legacy-logdir"): Legacy(
        Outcome.LOSES,
        _lz4_v0_partitions_incomplete,
        "aiokafka refuses every magic-0 LZ4 wrapper (Kafka's own framing quirk, KAFKA-3160), and getmany raises it "
        "before the records of the other partitions",
    ),
    ("kafkajs", "legacy-logdir"): Legacy(
        Outcome.LOSES,
        lambda v: v.read == 0 and any("Invalid stream descriptor checksum" in e for e in v.error_kinds),
        "kafkajs-lz4 refuses the magic-0 LZ4 framing, and one batch it cannot decode fails the whole fetch response",
    ),
    ("confluent-kafka", "legacy-logdir"): Legacy(
        Outcome.WRONG,
        lambda v: (
            v.wrong == v.wrong_by_field.get("timestamp") == 1
            and [(d.partition, d.offset) for d in v.differences] == [("plain-v1-0", 4)]
        ),
        "librdkafka reports a v1 message's timestamp of 0 as no timestamp (a v2 record's 0 it reports as 0)",
    ),
}


@pytest.mark.parametrize("fixture", list(SOURCES))
@pytest.mark.parametrize("name", CLIENTS)
def test_legacy_data_is_read_as_measured(verdict, name, fixture):
    v = verdict(name, fixture, False)
    known = LEGACY.get((name, fixture), Legacy(Outcome.EQUAL))
    if known.outcome == Outcome.EQUAL:
        assert v.outcome == Outcome.EQUAL, _explain(v)
        return
    assert v.outcome != Outcome.EQUAL, (
        f"{v.label} now reads every legacy record of {fixture} exactly: {known.why} is no longer true of it. Update "
        f"LEGACY in tests/test_clients.py and the README's table ({REGENERATE})."
    )
    assert v.outcome == known.outcome and known.check(v), f"{known.why}, but:\n{_explain(v)}"


# --- the README's table is this measurement ----------------------------------------------------------------------


def test_readme_clients_table_is_the_measured_one(verdict, request, tmp_path):
    measured_runs = [verdict(n, f, c) for n in CLIENTS for f in SOURCES for c in (False, True)]
    columns = [f"{f}{' converted' if c else ''}" for f in SOURCES for c in (False, True)]
    table = markdown(columns, rows(measured_runs, columns))
    counts = markdown(columns, rows(measured_runs, columns, counts=True))
    cache = getattr(request.config, "cache", None)  # none under -p no:cacheprovider
    where = (Path(cache.mkdir("clients")) if cache is not None else tmp_path) / "clients-table.md"
    where.write_text(f"{table}\nwith the counts of this run:\n\n{counts}")
    sys.stdout.write(f"\nclients table (also in {where}):\n{counts}")
    readme = REPO / "README.md"
    text = readme.read_text()
    found = re.search(re.escape(README_START) + r"\n(.*?)" + re.escape(README_END), text, re.S)
    assert found is not None, f"README.md has no clients table between {README_START!r} and {README_END!r}"
    if os.environ.get(WRITE_ENV) == "1":
        readme.write_text(text[: found.start(1)] + table + text[found.end(1) :])
        return
    assert found.group(1) == table, (
        f"the README's clients table is not what this run measured (the measured one is in {where}); if the "
        f"change is right, rewrite it: {REGENERATE}"
    )
