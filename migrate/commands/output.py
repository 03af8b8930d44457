"""Where output goes: data on stdout (JSON for machines, text for people), messages and progress on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from migrate.watch.pipes import silence_stdout


def emit(data: Any, as_json: bool, text: str) -> None:
    """The verb's result, written once its verdict is known: a reader that goes away before the end (``scan --json
    | head``) loses the rest of the output, not the verdict, so the verb still exits with its own code."""
    try:
        print(json.dumps(data, indent=2) if as_json else text, flush=True)
    except BrokenPipeError:
        silence_stdout()


def note(message: str) -> None:
    print(message, file=sys.stderr)
