"""What keeps pre-staging gentle on a live broker: a byte-rate throttle over reads and writes together, a pause
file and an abort file, all consulted before every piece of I/O (at most ``piece`` bytes, well under a second).

The throttle is Kafka's own idea (the cleaner's ``Throttler`` is fed read and write bytes alike,
``log.cleaner.io.max.bytes.per.second``), held as a token bucket whose burst is a small part of the window, so
that any window of ``window_seconds`` sees at most ``rate * window * 1.08`` bytes: ``burst + piece <= 0.08`` of a
window.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from itertools import accumulate
from pathlib import Path

from migrate.errors import MigrateError

DEFAULT_WINDOW_SECONDS = 10.0
_SLACK = 0.04  # of a window: the bucket's burst, and again the largest piece
_POLL_SECONDS = 0.2  # pause and abort files are looked at this often while waiting
MAX_PIECE = 1 << 20


class Aborted(MigrateError):
    """The abort file appeared: the segment in progress is discarded, what was staged before stays whole."""


class Controls:
    """The throttle, pause and abort files of one run, and the tally of the I/O it let through."""

    def __init__(
        self,
        rate: int | None = None,
        pause_file: str | Path | None = None,
        abort_file: str | Path | None = None,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        on_pause: Callable[[str], None] | None = None,
    ) -> None:
        if rate is not None and rate < 1:
            raise ValueError(f"the rate must be a positive number of bytes per second, not {rate}")
        self.rate = rate
        self.pause_file = Path(pause_file) if pause_file else None
        self.abort_file = Path(abort_file) if abort_file else None
        self.window_seconds = window_seconds
        self.burst_seconds = _SLACK * window_seconds
        self.piece = MAX_PIECE if rate is None else max(4096, min(MAX_PIECE, int(rate * self.burst_seconds)))
        self.on_pause = on_pause
        self.started = time.monotonic()
        self.times: list[float] = []  # when each piece was let through (seconds since started)
        self.sizes: list[int] = []
        self.total = 0
        self.paused_seconds = 0.0
        self._virtual = self.started  # the bucket: the time at which the bytes let through so far are paid for

    def check(self) -> None:
        """Raise Aborted if the abort file exists; wait while the pause file exists."""
        if self.abort_file is not None and self.abort_file.exists():
            raise Aborted(f"abort file {self.abort_file} found: stopped; the segment in progress was discarded")
        if self.pause_file is None or not self.pause_file.exists():
            return
        if self.on_pause is not None:
            self.on_pause(f"paused: {self.pause_file} exists; no I/O until it is removed")
        began = time.monotonic()
        while self.pause_file.exists():
            time.sleep(_POLL_SECONDS)
            if self.abort_file is not None and self.abort_file.exists():
                raise Aborted(f"abort file {self.abort_file} found while paused: stopped")
        self.paused_seconds += time.monotonic() - began
        if self.on_pause is not None:
            self.on_pause(f"resumed: {self.pause_file} is gone")

    def gate(self, size: int) -> None:
        """Wait until ``size`` bytes may be read or written, then count them (a piece at a time)."""
        while size > 0:
            step = min(size, self.piece)
            self._gate_piece(step)
            size -= step

    def _gate_piece(self, size: int) -> None:
        self.check()
        if self.rate is not None:
            while True:
                now = time.monotonic()
                start = max(self._virtual, now - self.burst_seconds)
                if start <= now:
                    break
                time.sleep(min(start - now, _POLL_SECONDS))
                self.check()
            self._virtual = start + size / self.rate
        self.times.append(time.monotonic() - self.started)
        self.sizes.append(size)
        self.total += size

    def max_window_bytes(self, window: float | None = None) -> int:
        """The most bytes let through within any ``window`` seconds (default: this throttle's window), sliding."""
        width = self.window_seconds if window is None else window
        prefix = list(accumulate(self.sizes, initial=0))
        best = 0
        for i, t in enumerate(self.times):
            first = bisect_left(self.times, t - width, 0, i + 1)
            best = max(best, prefix[i + 1] - prefix[first])
        return best

    def window_totals(self) -> list[int]:
        """Bytes let through in each consecutive window since the start (what the run reports)."""
        totals: list[int] = []
        for t, n in zip(self.times, self.sizes):
            k = int(t // self.window_seconds)
            totals.extend([0] * (k + 1 - len(totals)))
            totals[k] += n
        return totals
