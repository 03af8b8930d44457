"""Named points where a test can kill the process or make a write fail, to prove every recovery path converges.

``KAFKA_LOG_MIGRATE_CRASH_AT=POINT[:N]`` ends the process with ``os._exit(77)`` (as a power cut would: no cleanup,
no flush) the N-th time (default first) the run passes POINT. ``KAFKA_LOG_MIGRATE_FAIL_AT=POINT[:N]=ERRNO`` raises
``OSError(ERRNO)`` there instead (ENOSPC, EIO, EPERM, ...), as a full disk or a failing device would. Points are
named after what has just become durable (``commit:swap-begun``) or what is about to happen (``before:rename``);
``points()`` lists those a run passed, so tests can sweep all of them. Nothing else reads these variables, and a run
without them pays one dictionary lookup per point.
"""

from __future__ import annotations

import errno
import os
from collections import Counter

CRASH_ENV = "KAFKA_LOG_MIGRATE_CRASH_AT"
FAIL_ENV = "KAFKA_LOG_MIGRATE_FAIL_AT"
TRACE_ENV = "KAFKA_LOG_MIGRATE_TRACE_POINTS"  # a file: every point passed is appended to it (crash-matrix tests)
CRASH_EXIT = 77

_seen: Counter[str] = Counter()

# A run passes 10^6 points: each asks the environment's own dict for its three keys (what ``os.environ.get`` does
# after encoding the key and going through the Mapping machinery, several times slower); a test that sets a variable
# while the process runs is seen at the next point, as before. A variable set empty is unset: a LocalCluster's
# workers get every switch, an unset one as "" (engines.dask._worker_environment), and took the slow path at
# every point.
_ENV_DATA = getattr(os.environ, "_data", None)
_KEYS = tuple(os.fsencode(k) for k in (CRASH_ENV, FAIL_ENV, TRACE_ENV)) if isinstance(_ENV_DATA, dict) else ()


def _target(spec: str) -> tuple[str, int]:
    head, sep, count = spec.rpartition(":")
    return (head, int(count)) if sep and count.isdigit() else (spec, 1)


def point(name: str) -> None:
    """Pass the point ``name``: crash or fail here if a test asked for it."""
    if _KEYS and not (_ENV_DATA.get(_KEYS[0]) or _ENV_DATA.get(_KEYS[1]) or _ENV_DATA.get(_KEYS[2])):  # type: ignore[union-attr]
        return
    crash = os.environ.get(CRASH_ENV)
    fail = os.environ.get(FAIL_ENV)
    trace = os.environ.get(TRACE_ENV)
    if not (crash or fail or trace):
        return
    _seen[name] += 1
    if trace:
        with open(trace, "a") as f:
            f.write(f"{name}\n")
    if crash and _target(crash) == (name, _seen[name]):
        os._exit(CRASH_EXIT)
    if fail:
        where, _, code = fail.rpartition("=")
        if _target(where) == (name, _seen[name]):
            number = getattr(errno, code, None) if not code.isdigit() else int(code)
            if number is None:
                raise ValueError(f"{FAIL_ENV}: unknown errno {code!r}")
            raise OSError(number, f"{os.strerror(number)} (injected at {name})")


def reset() -> None:
    """Forget how often each point was passed (tests that inject several faults in one process)."""
    _seen.clear()
