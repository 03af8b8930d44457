"""A reader of stdout that went away (``kafka-log-migrate scan --json | head``)."""

from __future__ import annotations

import os
import sys


def silence_stdout() -> None:
    """Point stdout at /dev/null so that the flush at interpreter exit does not raise BrokenPipeError again (the
    recipe of Python's signal module documentation). The verb's verdict, its exit code, stays what it was."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout has no file descriptor (captured by a test harness)
        pass
