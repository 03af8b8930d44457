"""One client over one log dir, whole: the log dir served read-only on loopback (``migrate.serve``), the client's
driver run over every partition, its records judged against Kafka's reader of the same partitions."""

from __future__ import annotations

import secrets
from pathlib import Path

from migrate.consumers.clients import Client
from migrate.consumers.expected import Expected
from migrate.consumers.judge import judge
from migrate.consumers.records import ClientKind, ClientVerdict, Outcome
from migrate.consumers.run import Partition, consume, records_of
from migrate.serve.server import Endpoint


def withheld_topics(client: Client, expected: Expected) -> dict[str, str]:
    """Topics not given to ``client``, with the reason: those with a batch of a codec it lacks. Whole topics, since a
    subscribing client (kafkajs) fetches every partition of a topic, and one batch it cannot decode fails its whole
    fetch response."""
    out: dict[str, str] = {}
    for (topic, _), records in expected.items():
        codecs = {r.codec for r in records.values()} & client.missing_codecs
        if codecs:
            names = "/".join(sorted(codecs))
            out[topic] = f"{names} batches, and {client.kind} has no {names} codec"
    return out


def measure(
    client: Client,
    log_dirs: list[Path],
    expected: Expected,
    label: str,
    work: Path,
    *,
    idle_ms: int = 5000,
    deadline_ms: int = 120_000,
    max_wait_cap_ms: int = 200,
    keep_output: bool = True,
) -> ClientVerdict:
    """Serve ``log_dirs``, consume with ``client`` the partitions ``expected`` holds (Kafka's reader of the same
    log dirs), judge. ``max_wait_cap_ms`` bounds how long a fetch with nothing to return waits: the log does not
    grow, and a client at its end asks again sooner. ``keep_output``: leave the driver's output (the records
    themselves) in ``work``."""
    skip = withheld_topics(client, expected)
    with Endpoint(log_dirs, max_wait_cap_ms=max_wait_cap_ms) as endpoint:
        served = endpoint.log.partitions
        partitions = [
            Partition(t, p, s.log_end_offset)
            for (t, p), s in sorted(served.items())
            if t not in skip and (t, p) in expected
        ]
        given = {(p.topic, p.partition) for p in partitions}
        want: Expected = {
            key: {o: r for o, r in records.items() if o >= served[key].log_start_offset}
            for key, records in expected.items()
            if key in given
        }
        withheld = tuple(f"{t}-{p} ({skip[t]})" for (t, p) in sorted(served) if t in skip and (t, p) in expected)
        output = work / f"{client.kind}-{secrets.token_hex(4)}.jsonl"
        run = consume(
            client,
            endpoint.bootstrap,
            partitions,
            output,
            idle_ms=idle_ms,
            deadline_ms=deadline_ms,
            group=f"kafka-log-migrate-{client.kind}-{secrets.token_hex(4)}",
            withheld=withheld,
        )
    verdict = judge(run, records_of(output), want, label)
    if not keep_output:
        output.unlink(missing_ok=True)
    return verdict


def unavailable(kind: ClientKind, label: str, log_dir: str, reason: str) -> ClientVerdict:
    """The verdict on a client that could not run here."""
    return ClientVerdict(
        kind=kind,
        label=label,
        log_dir=log_dir,
        outcome=Outcome.UNAVAILABLE,
        expected=0,
        read=0,
        equal=0,
        lost=0,
        wrong=0,
        known=0,
        extra=0,
        duplicates=0,
        errors=0,
        end=reason,
        exit="not run",
        seconds=0.0,
        summary=f"not run: {reason}",
        wrong_by_field={},
        incomplete=(),
        withheld=(),
        first_errors=(),
        differences=(),
    )
