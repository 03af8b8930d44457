"""Where output goes: data on stdout (JSON for machines, text for people), messages and progress on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit(data: Any, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2) if as_json else text)


def note(message: str) -> None:
    print(message, file=sys.stderr)
