"""What keeps pre-staging gentle on a live broker: a byte-rate throttle over reads and writes together (its rate
adjustable while running through a rate file), a pause file, an abort file and a floor of free space on the staging
filesystem, all consulted before every piece of I/O (at most ``piece`` bytes, well under a second).

The throttle is Kafka's own idea (the cleaner's ``Throttler`` is fed read and write bytes alike,
``log.cleaner.io.max.bytes.per.second``), held as a token bucket whose burst is a small part of the window, so
that any window of ``window_seconds`` sees at most ``rate * window * 1.08`` bytes: ``burst + piece <= 0.08`` of a
window.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from migrate.errors import MigrateError
from migrate.units import human_bytes, human_rate, parse_data_bytes

DEFAULT_WINDOW_SECONDS = 10.0
_SLACK = 0.04  # of a window: the bucket's burst, and again the largest piece
_POLL_SECONDS = 0.2  # pause and abort files are looked at this often while waiting
MAX_PIECE = 1 << 20


_RATE_FILE_POLL_SECONDS = 1.0
_SPACE_CHECK_BYTES = 8 << 20  # of I/O between two looks at the staging filesystem's free space


class Aborted(MigrateError):
    """The abort file appeared: the segment in progress is discarded, what was staged before stays whole."""


class SpaceFloorReached(Aborted):
    """The staging filesystem's free space fell to the floor: stop before the broker's own writes run short."""


def parse_rate(text: str) -> int | None:
    """``50MB``, ``1G``, ``123456`` bytes per second; ``0`` or ``unlimited``: no limit (None)."""
    text = text.strip()
    if text in ("0", "unlimited"):
        return None
    rate = parse_data_bytes(text)
    if rate < 1:
        raise ValueError(f"the rate must be a positive number of bytes per second, not {text!r}")
    return rate


class SpaceFloor:
    """The free space a pass leaves on the staging filesystem, which is the broker's: the larger of ``fraction`` of
    the filesystem and ``min_bytes``. Looked at before each segment (with room for its output) and as it is written."""

    def __init__(self, fraction: float = 0.10, min_bytes: int = 0) -> None:
        if not 0 <= fraction < 1 or min_bytes < 0:
            raise ValueError(f"the free-space floor must be a fraction in [0, 1) and bytes >= 0, not {fraction}")
        self.fraction = fraction
        self.min_bytes = min_bytes

    def check(self, path: Path, upcoming: int = 0) -> None:
        """Raise SpaceFloorReached when writing ``upcoming`` more bytes under ``path`` would pass the floor."""
        st = os.statvfs(path)
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        floor = max(int(total * self.fraction), self.min_bytes)
        if free - upcoming < floor:
            more = f" and the next segment may need {human_bytes(upcoming)}" if upcoming else ""
            raise SpaceFloorReached(
                f"the staging filesystem of {path} has {human_bytes(free)} free of {human_bytes(total)}{more}: the "
                f"floor is {human_bytes(floor)} (--min-free), kept for the broker's own writes. Stopped before "
                "writing more; the segment in progress was discarded and what was staged before is kept. Free space "
                "there (or lower --min-free), then run prestage again."
            )


@dataclass(frozen=True)
class ControlSettings:
    """What an operator sets for a run's controls: plain values, so that a broker's worker can build its own."""

    rate: int | None = None
    pause_file: str | None = None
    abort_file: str | None = None
    window_seconds: float = DEFAULT_WINDOW_SECONDS
    rate_file: str | None = None
    min_free_fraction: float | None = 0.10  # None with min_free_bytes 0: no floor
    min_free_bytes: int = 0

    def build(self, on_pause: Callable[[str], None] | None = None) -> Controls:
        floor = None
        if self.min_free_fraction is not None or self.min_free_bytes:
            floor = SpaceFloor(self.min_free_fraction or 0.0, self.min_free_bytes)
        return Controls(
            self.rate,
            self.pause_file,
            self.abort_file,
            self.window_seconds,
            on_pause=on_pause,
            rate_file=self.rate_file,
            space_floor=floor,
        )


class Controls:
    """The throttle, pause and abort files of one run, and the tally of the I/O it let through."""

    def __init__(
        self,
        rate: int | None = None,
        pause_file: str | Path | None = None,
        abort_file: str | Path | None = None,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        on_pause: Callable[[str], None] | None = None,
        rate_file: str | Path | None = None,
        space_floor: SpaceFloor | None = None,
        rate_file_poll_seconds: float = _RATE_FILE_POLL_SECONDS,
    ) -> None:
        if rate is not None and rate < 1:
            raise ValueError(f"the rate must be a positive number of bytes per second, not {rate}")
        self.pause_file = Path(pause_file) if pause_file else None
        self.abort_file = Path(abort_file) if abort_file else None
        self.window_seconds = window_seconds
        self.burst_seconds = _SLACK * window_seconds
        self._set_rate(rate)
        self.on_pause = on_pause
        self.rate_file = Path(rate_file) if rate_file else None
        self.rate_file_poll_seconds = rate_file_poll_seconds
        self._rate_file_seen: tuple[int, int] | None = None  # (mtime_ns, size) of the rate file last read
        self._rate_file_looked = float("-inf")
        self.space_floor = space_floor
        self.staging: Path | None = None  # the staging tree being written: its filesystem is the one watched
        self._since_space_check = 0
        self.started = time.monotonic()
        self.times: list[float] = []  # when each piece was let through (seconds since started)
        self.sizes: list[int] = []
        self.total = 0
        self.paused_seconds = 0.0
        self.throttled_seconds = 0.0  # waited for the rate
        self._virtual = self.started  # the bucket: the time at which the bytes let through so far are paid for

    def _set_rate(self, rate: int | None) -> None:
        self.rate = rate
        self.piece = MAX_PIECE if rate is None else max(4096, min(MAX_PIECE, int(rate * self.burst_seconds)))

    def _reread_rate_file(self) -> None:
        """Take the rate file's rate when it changed (looked at once a second at most); a file that does not parse
        keeps the rate in force and says so."""
        now = time.monotonic()
        if self.rate_file is None or now - self._rate_file_looked < self.rate_file_poll_seconds:
            return
        self._rate_file_looked = now
        try:
            st = self.rate_file.stat()
            seen = (st.st_mtime_ns, st.st_size)
            if seen == self._rate_file_seen:
                return
            self._rate_file_seen = seen
            rate = parse_rate(self.rate_file.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            if self.on_pause is not None:
                self.on_pause(f"rate file {self.rate_file}: {exc}; the rate stays {self._rate_text()}")
            return
        if rate != self.rate:
            self._set_rate(rate)
            if self.on_pause is not None:
                self.on_pause(f"rate file {self.rate_file}: the rate is now {self._rate_text()}")

    def _rate_text(self) -> str:
        return "unlimited" if self.rate is None else human_rate(self.rate)

    def before_segment(self, size: int) -> None:
        """Before a segment of ``size`` source bytes is staged: room for its output above the floor. Its v2 form
        can be 2.6 times the size (tiny uncompressed messages), so three times is asked for."""
        self.check()
        if self.space_floor is not None and self.staging is not None:
            self.space_floor.check(self.staging, 3 * size)

    @property
    def waited_seconds(self) -> float:
        """Time spent waiting for the rate or the pause file: not the conversion's own."""
        return self.throttled_seconds + self.paused_seconds

    def check(self) -> None:
        """Raise Aborted if the abort file exists; wait while the pause file exists; take a new rate from the rate
        file."""
        self._reread_rate_file()
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
                nap = min(start - now, _POLL_SECONDS)
                time.sleep(nap)
                self.throttled_seconds += nap
                self.check()
            self._virtual = start + size / self.rate
        self.times.append(time.monotonic() - self.started)
        self.sizes.append(size)
        self.total += size
        self._since_space_check += size
        if self.space_floor is not None and self.staging is not None and self._since_space_check >= _SPACE_CHECK_BYTES:
            self._since_space_check = 0
            self.space_floor.check(self.staging)

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
