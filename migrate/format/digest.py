"""A content digest of a log that does not depend on its format, codec or batching.

It is the same rolling SHA-256 that Kafka's oracle (``oracle dump --summary``) prints, so our digests and Kafka's
can be compared directly. For every record, in order (integers big-endian)::

    int64 offset
    [int64 timestamp]                 only in the timestamped variant (sha256_ts)
    bytes(key), bytes(value)          bytes(b) = 01 if b is null, else 00 + int32 len(b) + b
    int32 header count, then per header: int32 len(utf-8 name) + name + bytes(value)

Two logs with equal ``sha256`` hold the same records at the same offsets; equal ``sha256_ts`` also means equal
timestamps.

The same serialization can be hashed with XXH3-128 instead (``DigestAlgorithm.XXH3_128``, about ten times faster
than SHA-256 here): what a run uses to check its own outputs when it need not be compared with Kafka's summary.

A segment converted as several ranges (each by its own worker) has a *composite* digest: each range's records are
hashed apart, and the composite is the hash of the ranges' raw digests in order. ``splits`` names the first offset
of every range after the first, so a reader of the whole segment can cut its records at the same places.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xxhash

from migrate.format import accel
from migrate.format.buffers import check_pieces, int64_column
from migrate.format.records import RecordColumns

_digest_stream = accel.compiled("digest_stream")
_NULL = b"\x01"
_I = struct.Struct(">i")


SHA256 = "sha256"
XXH3_128 = "xxh3-128"
_HASHES: dict[str, Callable[[], Any]] = {SHA256: hashlib.sha256, XXH3_128: xxhash.xxh3_128}


def hasher(algorithm: str) -> Any:
    """A fresh hash object of ``algorithm`` ("sha256" or "xxh3-128"; DigestAlgorithm values are these strings)."""
    try:
        return _HASHES[str(algorithm)]()
    except KeyError:
        raise ValueError(f"unknown digest algorithm {algorithm!r}: use {' or '.join(_HASHES)}") from None


def composite(algorithm: str, digests: Sequence[str]) -> str:
    """The digest of a segment converted in ranges, from each range's hex digest in order."""
    h = hasher(algorithm)
    for d in digests:
        h.update(bytes.fromhex(d))
    return h.hexdigest()


class _Split:
    """One digest over records cut at ``splits`` (offsets): a hash per piece, combined by ``composite``."""

    def __init__(self, algorithm: str, splits: Sequence[int]) -> None:
        self.algorithm = str(algorithm)
        self.splits = list(splits)
        self.done: list[str] = []
        self.current = hasher(algorithm)

    def next_piece(self) -> None:
        self.done.append(self.current.hexdigest())
        self.current = hasher(self.algorithm)

    def hexdigest(self) -> str:
        return composite(self.algorithm, [*self.done, self.current.hexdigest()])


class LogDigest:
    """Both digests, fed column-wise a chunk of records at a time."""

    def __init__(
        self, plain: bool = True, timed: bool = True, algorithm: str = SHA256, splits: Sequence[int] = ()
    ) -> None:
        """``plain``/``timed``: which of the two digests to compute (each is a full pass over the records).
        ``splits``: compute the composite digest of a segment converted in ranges (see the module docstring)."""
        self.algorithm = str(algorithm)
        self.plain = hasher(algorithm) if plain else None
        self.timed = hasher(algorithm) if timed else None
        self.records = 0
        self._split = [_Split(algorithm, splits) if on else None for on in (plain, timed)] if splits else None
        self._next_split = 0

    def update(self, cols: RecordColumns) -> None:
        n = len(cols)
        if n == 0:
            return
        if self._split is not None:
            self._update_split(cols, self._split)
            return
        self._update(cols)

    def _update_split(self, cols: RecordColumns, split: list[_Split | None]) -> None:
        """Cut ``cols`` where the next ranges begin, and hash each piece into its range's digest (``split``: the
        plain and the timed digest's ranges, None for a digest not computed)."""
        splits = next(s.splits for s in split if s is not None)
        a = 0
        while True:
            if self._next_split < len(splits):
                b = int(np.searchsorted(cols.offsets, splits[self._next_split], side="left"))
            else:
                b = len(cols)
            if b > a:
                piece = cols if (a, b) == (0, len(cols)) else cols.slice(a, b)
                self.plain = split[0].current if split[0] is not None else None
                self.timed = split[1].current if split[1] is not None else None
                self._update(piece)
            if b >= len(cols):
                return
            for s in split:
                if s is not None:
                    s.next_piece()
            self._next_split += 1
            a = b

    def _update_columns(self, cols: RecordColumns) -> None:
        """The accelerator serializes the records; records with headers take the reference."""
        if cols.headers is not None:
            self._update_rows(cols)
            return
        arrays = [
            int64_column(a)
            for a in (cols.offsets, cols.timestamps, cols.key_pos, cols.key_len, cols.value_pos, cols.value_len)
        ]
        if self.plain is not None:
            self.plain.update(_digest_stream(cols.buffer, *arrays, False))
        if self.timed is not None:
            self.timed.update(_digest_stream(cols.buffer, *arrays, True))
        self.records += len(cols)

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
            parts: list[bytes | memoryview] = []
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

    _update = accel.pick(_update_columns, _update_rows)

    def update_timed_stream(self, stream: bytes, records: int) -> bool:
        """``records`` already serialized with their timestamps (``digest_stream``'s bytes: the accelerator's
        ``small_v2_records``) into the timestamped digest; False, and nothing taken, where this digest also needs
        them otherwise (the plain digest, or the pieces of a segment converted in ranges)."""
        if self.plain is not None or self.timed is None or self._split is not None:
            return False
        self.timed.update(stream)
        self.records += records
        return True

    def hexdigests(self) -> tuple[str, str]:
        """(plain, timestamped) digests in hex; "" for one not computed."""
        if self._split is not None:
            return tuple(s.hexdigest() if s is not None else "" for s in self._split)  # type: ignore[return-value]
        return (
            self.plain.hexdigest() if self.plain is not None else "",
            self.timed.hexdigest() if self.timed is not None else "",
        )


def timestamps_only(cols: RecordColumns, timestamps: np.ndarray) -> RecordColumns:
    """The same records with other timestamps (to digest what a conversion policy will write)."""
    return RecordColumns(
        cols.buffer, cols.offsets, timestamps, cols.key_pos, cols.key_len, cols.value_pos, cols.value_len, cols.headers
    )
