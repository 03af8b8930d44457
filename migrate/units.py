"""Sizes and durations as operators write and read them.

Two byte conventions, each where operators expect it: disk and data sizes (``--cluster-bytes``) are decimal like a
disk's label (``120G`` = 120 * 10^9, ``800GiB`` or ``800Gi`` = 800 * 2^30); memory limits (``--compact-memory-limit``)
are binary like a JVM's ``-Xmx`` (``512M`` = 512 * 2^20). Printed sizes are decimal (KB = 1000 bytes).
"""

from __future__ import annotations

import re

_DATA_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)b?\s*$", re.IGNORECASE)
_MEMORY_UNITS = {"": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20}
_MEMORY_UNITS |= {"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def human_bytes(n: int | float) -> str:
    """Bytes as every verb, report and page prints them: ``0 B``, ``812 B``, ``205.1 KB``, ``354.0 MB``, ``2.1 GB``."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def human_rate(bytes_per_second: float) -> str:
    """A throughput: ``78.2 MB/s``, ``205.1 KB/s``."""
    return f"{human_bytes(bytes_per_second)}/s"


def human_seconds(s: float) -> str:
    """A duration: ``0 s``, ``45 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 10 min``, ``3.5 days``."""
    if s <= 0:
        return "0 s"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    whole = round(s)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    if whole < 2 * 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{s / 86400:.1f} days"


def parse_data_bytes(text: str) -> int:
    """``120G`` (10^9), ``120GiB``/``120Gi`` (2^30), ``5T``, ``123456789``: what operators write for disk sizes."""
    m = _DATA_SIZE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a byte count (examples: 123456789, 120G, 1.5T, 800GiB)")
    number, unit, binary = float(m.group(1)), m.group(2).lower(), m.group(3)
    power = "kmgtp".index(unit) + 1 if unit else 0
    return int(number * (1024 if binary else 1000) ** power)


def parse_memory_bytes(text: str) -> int:
    """``512MiB``, ``2g``, ``1048576`` (binary units) as bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m[2].lower() not in _MEMORY_UNITS or int(m[1]) < 1:
        raise ValueError(f"{text!r} is not a size: use a positive number of bytes, or with K, M, G, T (e.g. 512M)")
    return int(m[1]) * _MEMORY_UNITS[m[2].lower()]


def parse_duration_ms(text: str) -> int:
    """``7d``, ``36h``, ``90m``, ``30s``, ``1500ms``, ``2w`` (or a plain number of milliseconds) as milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h|d|w)?\s*", text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration: use a number with ms, s, m, h, d or w (e.g. 7d, 36h)")
    return int(m[1]) * _DURATION_UNITS[m[2] or "ms"]
