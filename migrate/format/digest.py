"""A content digest of a log that does not depend on its format, codec or batching.

It is the same rolling SHA-256 that Kafka's oracle (``oracle dump --summary``) prints, so our digests and Kafka's
can be compared directly. For every record, in order (integers big-endian)::

    int64 offset
    [int64 timestamp]                 only in the timestamped variant (sha256_ts)
    bytes(key), bytes(value)          bytes(b) = 01 if b is null, else 00 + int32 len(b) + b
    int32 header count, then per header: int32 len(utf-8 name) + name + bytes(value)

Two logs with equal ``sha256`` hold the same records at the same offsets; equal ``sha256_ts`` also means equal
timestamps.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from migrate.format import accel
from migrate.format._bytes import check_pieces, int64_column
from migrate.format.records import RecordColumns

_NULL = b"\x01"
_Q = struct.Struct(">q")
_I = struct.Struct(">i")


class LogDigest:
    """Both digests, fed column-wise a chunk of records at a time."""

    def __init__(self, plain: bool = True, timed: bool = True) -> None:
        """``plain``/``timed``: which of the two digests to compute (each is a full SHA-256 pass over the records)."""
        self.plain = hashlib.sha256() if plain else None
        self.timed = hashlib.sha256() if timed else None
        self.records = 0

    def update(self, cols: RecordColumns) -> None:
        n = len(cols)
        if n == 0:
            return
        if accel.speedups is not None and cols.headers is None:
            arrays = [
                int64_column(a)
                for a in (cols.offsets, cols.timestamps, cols.key_pos, cols.key_len, cols.value_pos, cols.value_len)
            ]
            if self.plain is not None:
                self.plain.update(accel.speedups.digest_stream(cols.buffer, *arrays, False))
            if self.timed is not None:
                self.timed.update(accel.speedups.digest_stream(cols.buffer, *arrays, True))
            self.records += n
            return
        self._update_rows(cols)

    def _update_rows(self, cols: RecordColumns) -> None:
        """The reference serialization, one record at a time (also the path for records with headers)."""
        n = len(cols)
        buf = cols.buffer
        size = memoryview(buf).nbytes
        # what the accelerator refuses, refused here too (a slice past the end would silently come out short)
        check_pieces(size, cols.key_pos, cols.key_len, "key", null="negative")
        check_pieces(size, cols.value_pos, cols.value_len, "value", null="negative")
        if n and max(int(cols.key_len.max()), int(cols.value_len.max())) > 2**31 - 1:
            raise OverflowError("a key or value longer than an int32 length")
        offsets = cols.offsets.astype(">i8").tobytes()
        stamps = cols.timestamps.astype(">i8").tobytes()
        kl = cols.key_len.tolist()
        kp = cols.key_pos.tolist()
        vl = cols.value_len.tolist()
        vp = cols.value_pos.tolist()
        headers = cols.headers
        plain: list[bytes] = []
        timed: list[bytes] = []
        mv = memoryview(buf)
        for i in range(n):
            parts = []
            k = kl[i]
            if k < 0:
                parts.append(_NULL)
            else:
                parts.append(b"\x00" + _I.pack(k))
                parts.append(mv[kp[i] : kp[i] + k])
            v = vl[i]
            if v < 0:
                parts.append(_NULL)
            else:
                parts.append(b"\x00" + _I.pack(v))
                parts.append(mv[vp[i] : vp[i] + v])
            hs = headers[i] if headers is not None else ()
            parts.append(_I.pack(len(hs)))
            for name, value in hs:
                nb = name.encode("utf-8")
                parts.append(_I.pack(len(nb)))
                parts.append(nb)
                if value is None:
                    parts.append(_NULL)
                else:
                    parts.append(b"\x00" + _I.pack(len(value)))
                    parts.append(value)
            rest = b"".join(parts)
            off = offsets[8 * i : 8 * i + 8]
            plain.append(off)
            plain.append(rest)
            timed.append(off)
            timed.append(stamps[8 * i : 8 * i + 8])
            timed.append(rest)
        if self.plain is not None:
            self.plain.update(b"".join(plain))
        if self.timed is not None:
            self.timed.update(b"".join(timed))
        self.records += n

    def hexdigests(self) -> tuple[str, str]:
        """(sha256, sha256_ts); "" for a digest not computed."""
        return (
            self.plain.hexdigest() if self.plain is not None else "",
            self.timed.hexdigest() if self.timed is not None else "",
        )


def timestamps_only(cols: RecordColumns, timestamps: np.ndarray) -> RecordColumns:
    """The same records with other timestamps (to digest what a conversion policy will write)."""
    return RecordColumns(
        cols.buffer, cols.offsets, timestamps, cols.key_pos, cols.key_len, cols.value_pos, cols.value_len, cols.headers
    )
