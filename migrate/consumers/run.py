"""One consumer over one served log dir: its driver run to the end of every partition, or until it stops making
progress, or its deadline; what it wrote read back.

The driver's output, one JSON object a line, written as it goes (unbuffered: a client that aborts the process leaves
every line it got to)::

    {"client": "confluent-kafka 2.10.0 (librdkafka 2.10.0)"}        its own name and version, first
    {"r": [topic, partition, offset, key hex | null, value hex | null, [[header name, value hex | null], ...],
           timestamp]}                                               each record it handed over
    {"error": "..."}                                                 each error it reported
    {"end": "..."}                                                   why it stopped, last

A driver stops by itself at its end, after ``idle_ms`` without progress, or at ``deadline_ms``; the process is killed
``KILL_GRACE`` seconds after that, so a hung client cannot hang the caller.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from migrate.consumers.clients import Client
from migrate.consumers.records import ClientRun, ConsumedRecord

KILL_GRACE = 30.0
MAX_ERRORS_KEPT = 10


@dataclass(frozen=True)
class Partition:
    topic: str
    partition: int
    end: int  # the log end offset: the driver is done with the partition once its position is there

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def consume(
    client: Client,
    bootstrap: str,
    partitions: list[Partition],
    output: Path,
    *,
    idle_ms: int = 5000,
    deadline_ms: int = 120_000,
    group: str = "kafka-log-migrate-clients",
    withheld: tuple[str, ...] = (),
) -> ClientRun:
    """Run ``client``'s driver over ``partitions`` at ``bootstrap``; its records go to ``output`` (read them with
    ``records_of``)."""
    output.unlink(missing_ok=True)
    args = [bootstrap, str(output), str(idle_ms), str(deadline_ms), group]
    args += [f"{p.topic}:{p.partition}:{p.end}" for p in partitions]
    env = {**os.environ, **client.env}
    clock = time.perf_counter()
    proc = subprocess.Popen(
        [*client.command, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=deadline_ms / 1000 + KILL_GRACE)
        killed = ""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        killed = f"killed {KILL_GRACE:.0f} s after its deadline"
    seconds = round(time.perf_counter() - clock, 3)
    code = proc.returncode
    if killed:
        exit = killed
    elif code < 0:
        exit = f"killed by {signal.Signals(-code).name}"
    elif code > 128 and code - 128 in signal.valid_signals():
        exit = f"ended by {signal.Signals(code - 128).name} (exit {code})"
    else:
        exit = f"exit {code}"
    label, end, records, errors = client.kind.value, "", 0, 0
    first_errors: list[str] = []
    kinds: dict[str, int] = {}
    for kind, value in _lines(output):
        if kind == "r":
            records += 1
        elif kind == "client":
            label = str(value)
        elif kind == "error":
            errors += 1
            kind_of = error_kind(str(value))
            kinds[kind_of] = kinds.get(kind_of, 0) + 1
            if len(first_errors) < MAX_ERRORS_KEPT and value not in first_errors:
                first_errors.append(str(value))
        elif kind == "end":
            end = str(value)
    text = stderr.decode(errors="replace")
    return ClientRun(
        client.kind,
        label,
        records,
        errors,
        tuple(first_errors),
        end or f"no end line: the process ended first ({exit})",
        exit,
        seconds,
        withheld,
        _stderr_tail(text),
        dict(sorted(kinds.items())),
    )


def error_kind(error: str) -> str:
    """An error message with its partition, numbers and positions taken out: one cause reads the same every run
    (librdkafka's ``KafkaError{...,str="..."}`` reduced to its text, a repeated exception name said once)."""
    text = re.sub(r"^[\w.-]+-\d+ at offset -?\d+: ", "", error)
    wrapped = re.fullmatch(r'KafkaError\{.*?str="(.*)"\}', text)
    if wrapped is not None:
        text = wrapped.group(1)
    text = re.sub(r"^(\w+): \1: ", r"\1: ", text)
    return re.sub(r"\b\d{2,}\b", "N", text)[:160]


def _stderr_tail(text: str) -> str:
    """The last lines of a driver's stderr that say something (the JVM's SLF4J banner and node's warnings aside)."""
    lines = [x for x in text.splitlines() if x.strip() and not x.startswith("SLF4J:")]
    return "\n".join(lines[-5:])[-2000:]


def _lines(output: Path) -> Iterator[tuple[str, object]]:
    if not output.exists():
        return
    with open(output, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            try:
                obj = json.loads(line)
            except ValueError:
                continue  # the last line of a process killed mid-write
            if isinstance(obj, dict) and len(obj) == 1:
                ((kind, value),) = obj.items()
                yield kind, value


def records_of(output: Path) -> Iterator[ConsumedRecord]:
    """The records a driver wrote, in the order it handed them over."""
    for kind, value in _lines(output):
        if kind != "r" or not isinstance(value, list) or len(value) != 7:
            continue
        topic, partition, offset, key, val, headers, timestamp = value
        yield ConsumedRecord(
            str(topic),
            int(partition),
            int(offset),
            None if key is None else bytes.fromhex(key),
            None if val is None else bytes.fromhex(val),
            tuple((str(n), None if v is None else bytes.fromhex(v)) for n, v in headers),
            int(timestamp),
        )
