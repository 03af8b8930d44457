"""Consume every given partition from its beginning with kafka-python, writing each record as a JSON line.

Run by ``migrate.consumers``: ``python kafka_python_consumer.py BOOTSTRAP OUT IDLE_MS DEADLINE_MS GROUP
TOPIC:PARTITION:END ...``. Manual assignment (no group). It stops once every partition's position reached END, after
IDLE_MS without a record or a position moving, or at DEADLINE_MS; its last line says which. Self-contained: it runs
in whichever interpreter has the client installed, and imports nothing of kafka-log-migrate.
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
    bootstrap, out, idle_ms, deadline_ms = argv[0], argv[1], int(argv[2]), int(argv[3])
    wanted = [(t, int(p), int(e)) for t, p, e in (a.rsplit(":", 2) for a in argv[5:])]
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(obj: Any) -> None:
        os.write(fd, (json.dumps(obj, separators=(",", ":")) + "\n").encode())

    import kafka
    from kafka import KafkaConsumer, TopicPartition

    emit({"client": f"kafka-python {kafka.__version__}"})
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tps = [TopicPartition(t, p) for t, p, _ in wanted]
    ends = {TopicPartition(t, p): e for t, p, e in wanted}
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    start = time.monotonic()
    moved = start
    cell = [start]
    watchdog(emit, cell, idle_ms)
    positions: dict[Any, int] = {}
    reason = "deadline"
    while time.monotonic() - start < deadline_ms / 1000:
        try:
            batches = consumer.poll(timeout_ms=200)
        except Exception as exc:  # whatever the client raises is its verdict on the data: record it, go on
            emit({"error": f"{type(exc).__name__}: {exc}"})
            time.sleep(0.1)  # the same error again at once would only fill the output
            batches = {}
        for tp, records in batches.items():
            for r in records:
                headers = [[name, None if value is None else value.hex()] for name, value in r.headers]
                key = None if r.key is None else r.key.hex()
                value = None if r.value is None else r.value.hex()
                ts = -1 if r.timestamp is None else r.timestamp
                emit({"r": [tp.topic, tp.partition, r.offset, key, value, headers, ts]})
                moved = cell[0] = time.monotonic()
        now = {tp: consumer.position(tp) for tp in tps}
        if now != positions:
            positions, moved = now, time.monotonic()
            cell[0] = moved
        if all(positions[tp] >= ends[tp] for tp in tps):
            reason = "every partition read to its end"
            break
        if time.monotonic() - moved > idle_ms / 1000:
            behind = [
                f"{tp.topic}-{tp.partition} at {positions[tp]} of {ends[tp]}" for tp in tps if positions[tp] < ends[tp]
            ]
            reason = f"no progress for {idle_ms} ms: {', '.join(behind)}"
            break
    emit({"end": reason})
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
