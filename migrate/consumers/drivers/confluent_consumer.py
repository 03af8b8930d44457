"""Consume every given partition from its beginning with confluent-kafka (librdkafka), writing each record as a JSON
line.

Run by ``migrate.consumers``: ``python confluent_consumer.py BOOTSTRAP OUT IDLE_MS DEADLINE_MS GROUP
TOPIC:PARTITION:END ...``. Manual assignment (librdkafka needs a group id even so; nothing is committed). A partition
is done at its end-of-partition event (``enable.partition.eof``); it stops once every partition is done, after IDLE_MS
without a record or an event, or at DEADLINE_MS; its last line says which. Self-contained: it runs in whichever
interpreter has the client installed, and imports nothing of kafka-log-migrate.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any


def watchdog(emit: Any, moved: list[float], idle_ms: int) -> None:
    """End the process when the client blocks (a poll that never returns, as kafka-python's may after a CRC error):
    the loop cannot notice that itself."""

    def watch() -> None:
        while True:
            time.sleep(0.1)
            if time.monotonic() - moved[0] > idle_ms / 1000 + 2:
                emit({"end": f"no progress for {idle_ms} ms: the client blocked in its poll"})
                os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str]) -> int:
    bootstrap, out, idle_ms, deadline_ms, group = argv[0], argv[1], int(argv[2]), int(argv[3]), argv[4]
    wanted = [(t, int(p), int(e)) for t, p, e in (a.rsplit(":", 2) for a in argv[5:])]
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(obj: Any) -> None:
        os.write(fd, (json.dumps(obj, separators=(",", ":")) + "\n").encode())

    import confluent_kafka as ck

    raw_version: Any = ck.version()  # a str in 2.16, a (str, int) before
    version = raw_version[0] if isinstance(raw_version, tuple) else raw_version
    library = ck.libversion()[0]
    emit({"client": f"confluent-kafka {version} (librdkafka {library})"})
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "error_cb": lambda err: emit({"error": str(err)}),
        }
    )
    consumer.assign([ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t, p, _ in wanted])
    done = {(t, p) for t, p, e in wanted if e == 0}
    start = time.monotonic()
    moved = start
    cell = [start]
    watchdog(emit, cell, idle_ms)
    reason = "deadline"
    while time.monotonic() - start < deadline_ms / 1000:
        if len(done) == len(wanted):
            reason = "every partition read to its end"
            break
        if time.monotonic() - moved > idle_ms / 1000:
            behind = [f"{t}-{p}" for t, p, _ in wanted if (t, p) not in done]
            reason = f"no progress for {idle_ms} ms: {', '.join(behind)} not at their end"
            break
        m = consumer.poll(0.2)
        if m is None:
            continue
        err = m.error()
        if err is not None:  # an error is no progress: a client that only reports the same error has stopped
            if err.code() == ck.KafkaError._PARTITION_EOF:
                done.add((str(m.topic()), int(m.partition() or 0)))
                moved = cell[0] = time.monotonic()
            else:
                emit({"error": f"{m.topic()}-{m.partition()} at offset {m.offset()}: {err}"})
            continue
        moved = cell[0] = time.monotonic()
        headers: list[list[Any]] = []
        raw_headers: Any = m.headers() or []
        for name, raw in raw_headers:
            headers.append([name, None if raw is None else bytes(raw).hex()])
        key, value = m.key(), m.value()
        kind, ts = m.timestamp()  # a record without a timestamp (v0) is TIMESTAMP_NOT_AVAILABLE: Kafka's -1
        ts = -1 if kind == ck.TIMESTAMP_NOT_AVAILABLE else ts
        emit(
            {
                "r": [
                    m.topic(),
                    m.partition(),
                    m.offset(),
                    None if key is None else bytes(key).hex(),
                    None if value is None else bytes(value).hex(),
                    headers,
                    ts,
                ]
            }
        )
    emit({"end": reason})
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
