"""The consumers that can be run here, and how: each is a driver in ``drivers/`` run by the client's own runtime.

- ``kafka-python``, ``aiokafka``, ``confluent-kafka``: a driver script run by a Python interpreter that has the
  library (this one, or another venv's, to measure another version);
- the Java client: ``JavaConsumer.java`` compiled with ``javac`` against the kafka-clients jar of a Kafka
  installation (``KAFKA_HOME/libs``) or any directory of jars, into a cache keyed by the source and the jars;
- kafkajs: ``kafkajs_consumer.js`` run by ``node`` with a ``node_modules`` that holds kafkajs (and kafkajs-lz4 and
  kafkajs-snappy for those codecs).

Every driver takes the same arguments (bootstrap, output file, idle and deadline milliseconds, a group id, and
``topic:partition:end`` of each partition) and writes the same JSON lines; ``migrate.consumers.run`` reads them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from migrate.consumers.records import ClientKind

DRIVERS = Path(__file__).resolve().parent / "drivers"
PYTHON_DRIVERS = {
    ClientKind.KAFKA_PYTHON: ("kafka", "kafka_python_consumer.py"),
    ClientKind.AIOKAFKA: ("aiokafka", "aiokafka_consumer.py"),
    ClientKind.CONFLUENT: ("confluent_kafka", "confluent_consumer.py"),
}


class ClientUnavailable(Exception):
    """The client cannot run here; the message says what is missing and how to get it."""


@dataclass(frozen=True)
class Client:
    """One runnable consumer: the command before the driver's arguments, and the environment it needs."""

    kind: ClientKind
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    missing_codecs: frozenset[str] = frozenset()  # batches of these codecs it cannot decode (kafkajs: zstd)
    where: str = ""  # the interpreter, jars or node_modules it runs from, for the report


def python_client(kind: ClientKind, python: str | Path = sys.executable) -> Client:
    """A Python client run by ``python``; raises ClientUnavailable when that interpreter lacks the library."""
    module, script = PYTHON_DRIVERS[kind]
    if str(python) == sys.executable:
        if importlib.util.find_spec(module) is None:
            raise ClientUnavailable(f"{kind} is not installed in {python} (pip install {kind})")
    else:
        probe = subprocess.run(
            [str(python), "-c", f"import {module}"], capture_output=True, text=True, timeout=60, check=False
        )
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["no error text"])[-1]
            raise ClientUnavailable(f"{kind} is not importable by {python} ({last[-200:]})")
    return Client(kind, (str(python), str(DRIVERS / script)), where=str(python))


def kafka_jars(kafka_home: str | Path) -> Path:
    """The directory of a Kafka installation's jars (``libs/``), or the directory itself when it holds
    kafka-clients; raises ClientUnavailable when there is no kafka-clients jar."""
    root = Path(kafka_home)
    for d in (root / "libs", root):
        if d.is_dir() and any(p.name.startswith("kafka-clients") and p.suffix == ".jar" for p in d.iterdir()):
            return d
    raise ClientUnavailable(
        f"no kafka-clients*.jar in {root}/libs or {root}: give --kafka-home the directory of a Kafka installation "
        "(the one with bin/ and libs/)"
    )


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafka-log-migrate" / "clients"


def java_client(jars: str | Path, cache: Path | None = None) -> Client:
    """Apache Kafka's Java consumer from the jars in ``jars`` (kafka-clients and what it needs: lz4, snappy, zstd,
    slf4j), its driver compiled once into ``cache``."""
    jars = Path(jars).resolve()
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        raise ClientUnavailable("the Java client needs java and javac (a JDK, 11 or later) on the PATH")
    source = DRIVERS / "JavaConsumer.java"
    listing = sorted(f"{p.name}:{p.stat().st_size}" for p in jars.glob("*.jar"))
    key = hashlib.sha256(source.read_bytes() + "\n".join(listing).encode()).hexdigest()[:16]
    classes = (cache or default_cache()) / f"java-{key}"
    classpath = f"{jars}/*"
    if not (classes / "JavaConsumer.class").exists():
        work = classes.with_name(f"{classes.name}.{os.getpid()}")
        work.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [javac, "-nowarn", "-d", str(work), "-cp", classpath, str(source)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            raise ClientUnavailable(f"javac could not build the Java consumer against {jars}: {done.stderr[-500:]}")
        try:
            work.rename(classes)  # another process may have won the race: its classes are the same
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
    return Client(ClientKind.JAVA, (java, "-cp", f"{classes}{os.pathsep}{classpath}", "JavaConsumer"), where=str(jars))


def kafkajs_client(node_modules: str | Path) -> Client:
    """kafkajs from ``node_modules``; kafkajs ships no zstd codec and the driver registers none, so it is given no
    partition that holds zstd batches."""
    node = shutil.which("node")
    if node is None:
        raise ClientUnavailable("kafkajs needs Node.js (node) on the PATH")
    modules = Path(node_modules).resolve()
    if not (modules / "kafkajs" / "package.json").exists():
        raise ClientUnavailable(f"no kafkajs in {modules} (npm install kafkajs kafkajs-lz4 kafkajs-snappy)")
    return Client(
        ClientKind.KAFKAJS,
        (node, str(DRIVERS / "kafkajs_consumer.js")),
        env={"NODE_PATH": str(modules)},
        missing_codecs=frozenset({"zstd"}),
        where=str(modules),
    )
