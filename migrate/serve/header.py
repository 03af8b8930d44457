"""The frame around every request and response, and their headers (RequestHeader.json, ResponseHeader.json).

::

    frame             size => int32, then that many bytes
    RequestHeader v1  request_api_key => int16, request_api_version => int16, correlation_id => int32,
                      client_id => nullable string (int16 length, in every version)
    RequestHeader v2  v1, then tagged fields                 (for the request versions its API makes flexible)
    ResponseHeader v0 correlation_id => int32
    ResponseHeader v1 v0, then tagged fields                 (flexible versions; never for ApiVersions, whose
                                                              response header stays v0 so any client can read it)

Pure: bytes in, records out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from migrate.serve.wire import Reader, WireError, uvarint

API_VERSIONS_KEY = 18
MAX_FRAME = 100 * 1024 * 1024  # socket.request.max.bytes' default: a larger frame is not a client talking to us
_HEAD = struct.Struct(">hhi")


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes of the header: the request body starts there


def peek_api(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame, before knowing whether its header is flexible."""
    if len(frame) < _HEAD.size:
        raise WireError(f"a request of {len(frame)} bytes, shorter than its header's first 8")
    key, version, correlation = _HEAD.unpack_from(frame)
    return key, version, correlation


def parse_request_header(frame: bytes, flexible: bool) -> RequestHeader:
    """The header of one request frame; ``flexible`` whether its API version is a flexible one (header v2)."""
    key, version, correlation = peek_api(frame)
    r = Reader(frame, _HEAD.size)
    n = r.length(flexible=False, wide=False)
    client_id = None
    if n is not None:
        try:
            client_id = bytes(r.take(n)).decode()
        except UnicodeDecodeError:
            raise WireError("a client id that is not UTF-8") from None
    if flexible:
        for _ in range(r.uvarint()):
            r.uvarint()
            r.take(r.uvarint())
    return RequestHeader(key, version, correlation, client_id, r.position)


def response_frame(correlation_id: int, body: bytes, flexible_header: bool) -> bytes:
    """A whole response frame: size, header (v1 with its empty tagged fields when ``flexible_header``), body."""
    header = struct.pack(">i", correlation_id) + (uvarint(0) if flexible_header else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body
