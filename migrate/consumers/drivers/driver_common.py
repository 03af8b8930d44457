"""What every Python driver shares: its arguments, its output, its clock and its watchdog.

``python <driver>.py BOOTSTRAP OUT IDLE_MS DEADLINE_MS GROUP TOPIC:PARTITION:END ...``: each driver consumes every
given partition from its beginning and writes JSON lines to OUT (unbuffered: a client that aborts the process leaves
every line it got to): ``{"client": ...}`` first, ``{"r": [topic, partition, offset, key hex, value hex,
[[header name, value hex], ...], timestamp]}`` per record, ``{"error": ...}`` per error the client reports, and
``{"end": why}`` last. Imported from the drivers' own directory (a script's directory is on its path): it runs in
whichever interpreter has the client installed, beside kafka-log-migrate's or not, and imports nothing of it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any


def hexed(data: Any) -> str | None:
    return None if data is None else bytes(data).hex()


class Run:
    def __init__(self, argv: list[str]) -> None:
        self.bootstrap, out = argv[0], argv[1]
        self.idle_ms, self.deadline_ms, self.group = int(argv[2]), int(argv[3]), argv[4]
        self.wanted = [(t, int(p), int(e)) for t, p, e in (a.rsplit(":", 2) for a in argv[5:])]
        self.fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.start = self.moved = time.monotonic()
        threading.Thread(target=self._watch, daemon=True).start()

    def emit(self, obj: Any) -> None:
        os.write(self.fd, (json.dumps(obj, separators=(",", ":")) + "\n").encode())

    def record(self, topic: str, partition: int, offset: int, key: Any, value: Any, headers: Any, ts: Any) -> None:
        """One record handed over; a timestamp of None (a v0 message has none) is Kafka's -1."""
        pairs = [[name, hexed(v)] for name, v in headers]
        self.emit({"r": [topic, partition, offset, hexed(key), hexed(value), pairs, -1 if ts is None else ts]})
        self.progressed()

    def error(self, text: str) -> None:
        """An error is no progress: a client that only reports the same error has stopped."""
        self.emit({"error": text})

    def progressed(self) -> None:
        self.moved = time.monotonic()

    def idle(self) -> bool:
        return time.monotonic() - self.moved > self.idle_ms / 1000

    def expired(self) -> bool:
        return time.monotonic() - self.start > self.deadline_ms / 1000

    def _watch(self) -> None:
        """End the process when the client blocks (a poll that never returns, as kafka-python's may after a CRC
        error): its loop cannot notice that itself."""
        while True:
            time.sleep(0.1)
            if time.monotonic() - self.moved > self.idle_ms / 1000 + 2:
                self.emit({"end": f"no progress for {self.idle_ms} ms: the client blocked in its poll"})
                os._exit(0)
