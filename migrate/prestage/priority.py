"""Pre-staging runs beside a broker that serves clients: it takes the lowest CPU priority and a low I/O priority, so
that the broker's threads and its disk reads win every contest. The throttle bounds the bytes; this bounds the share
of what is left.

I/O priority is Linux's ``ioprio_set`` (no Python binding: the raw system call), honoured by the BFQ and CFQ
schedulers and ignored by ``none``/``mq-deadline``, where the throttle alone holds.
"""

from __future__ import annotations

import ctypes
import enum
import os
import platform

_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_SHIFT = 13
_SYSCALLS = {"x86_64": (251, 252), "aarch64": (30, 31)}  # (ioprio_set, ioprio_get)
LOWEST_NICE = 19


class IoClass(int, enum.Enum):
    BEST_EFFORT = 2  # with the lowest level, 7: served after every other best-effort request
    IDLE = 3  # served only when no one else wants the disk: may starve behind a busy broker


class Priority(str, enum.Enum):
    LOW = "low"  # nice 19, best-effort I/O at its lowest level
    IDLE = "idle"  # nice 19, idle I/O
    NORMAL = "normal"  # as started

    def __str__(self) -> str:
        return self.value


def take_priority(priority: Priority) -> list[str]:
    """Set ``priority`` for this process; what could not be set (empty when all was)."""
    if priority == Priority.NORMAL:
        return []
    return lower_priority(IoClass.IDLE if priority == Priority.IDLE else IoClass.BEST_EFFORT)


def lower_priority(io_class: IoClass = IoClass.BEST_EFFORT) -> list[str]:
    """Nice 19 and the I/O class ``io_class`` (best effort at level 7, or idle) for this process and the threads
    and processes it starts; returns what could not be set, for the operator (empty when all was)."""
    problems = []
    try:
        os.setpriority(os.PRIO_PROCESS, 0, LOWEST_NICE)
    except OSError as exc:
        problems.append(f"CPU priority: {exc.strerror}")
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        return [*problems, f"I/O priority: not supported on {platform.machine()}"]
    level = 7 if io_class == IoClass.BEST_EFFORT else 0
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(numbers[0], _IOPRIO_WHO_PROCESS, 0, (int(io_class) << _IOPRIO_CLASS_SHIFT) | level) != 0:
        problems.append(f"I/O priority: {os.strerror(ctypes.get_errno())}")
    return problems
