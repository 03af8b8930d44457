"""Java's text rules, as Kafka's loaders apply them to the names and files of a log dir.

Kafka parses partition numbers with ``Integer.parseInt``, checkpoint fields with ``Pattern.split("\\s+")`` and reads
lines with ``BufferedReader.readLine``; each differs from Python's own parsing at the edges (signs, Unicode digits,
``\\r`` line breaks, leading empty fields), and a file Kafka accepts must not be refused here, nor the reverse.
"""

from __future__ import annotations

import re
from pathlib import Path

from migrate.errors import MalformedLogDirFileError

# Java's \s (ASCII whitespace), as used by Kafka's patterns and Pattern.split
JAVA_WS = "[ \t\n\x0b\f\r]"
JAVA_NOT_WS = "[^ \t\n\x0b\f\r]"
JAVA_INTEGER = re.compile(r"[+-]?\d+")  # Integer.parseInt / Long.parseLong accept a sign and (Unicode) digits
LINE_BREAK = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine


def java_int(text: str, bits: int = 32) -> int | None:
    """``Integer.parseInt`` (bits=32) / ``Long.parseLong`` (bits=64): the value, or None where Java throws."""
    if not JAVA_INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if -(1 << (bits - 1)) <= value < (1 << (bits - 1)) else None


def java_split(line: str) -> list[str]:
    """``Pattern.compile("\\\\s+").split(line)``: a leading empty field is kept, trailing empty fields dropped."""
    parts = re.split(f"{JAVA_WS}+", line)
    while parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()
    return parts


def read_lines(path: Path) -> list[str]:
    """The lines of ``path`` as ``BufferedReader.readLine`` returns them (no final empty line after a newline)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedLogDirFileError(str(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    lines = LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines
