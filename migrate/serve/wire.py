"""Kafka's wire primitives, and the one codec every message schema of ``migrate.serve`` goes through.

::

    int8, int16, int32, int64   big-endian, signed            bool   int8, 0 or 1          uuid   16 bytes
    string        int16 length + UTF-8, null = length -1    | flexible: uvarint (length + 1) + UTF-8, null = 0
    bytes,records int32 length + bytes, null = length -1    | flexible: uvarint (length + 1) + bytes, null = 0
    [T] array     int32 count + items, null = count -1      | flexible: uvarint (count + 1) + items, null = 0
    tagged fields (flexible versions only) after the fields of every struct:
                  uvarint count, then per field in increasing tag order: uvarint tag, uvarint size, its bytes

This is what Kafka's message generator reads from ``clients/src/main/resources/common/message/*.json`` and turns into
Java classes: a message is a struct of fields, each present in a range of versions (``versions``), possibly null in
some (``nullableVersions``), possibly a tagged field (``tag``, ``taggedVersions``); a message's flexible versions use
the compact forms and carry tagged fields. Here a schema is a dataclass whose fields say the same in their metadata,
through the constructors below (``int32("0+")``, ``string("0-12")``, ``array(Partition, "0+")``, ...), in the JSON's
order and with the JSON's defaults. A field outside the version being read takes its default; one outside the version
being written is left out. Unknown tagged fields are skipped on read, as Kafka does.

Bytes from a socket are untrusted: every malformed input raises ``WireError`` naming the byte position.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import struct
from dataclasses import dataclass
from typing import Any

MAX_VERSION = 0x7FFF
ZERO_UUID = bytes(16)


class WireError(Exception):
    """A request that does not parse: what, and at which byte of the message."""


@dataclass(frozen=True)
class Versions:
    """An inclusive range of versions, as the JSON writes them: "0+", "3-12", "7", "none"."""

    low: int
    high: int

    @classmethod
    @functools.cache
    def parse(cls, text: str) -> Versions:
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    def __str__(self) -> str:
        if self.low > self.high:
            return "none"
        if self.high == MAX_VERSION:
            return f"{self.low}+"
        return f"{self.low}-{self.high}" if self.high != self.low else str(self.low)


class Kind(enum.Enum):
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"
    UUID = "uuid"
    STRING = "string"
    BYTES = "bytes"
    RECORDS = "records"
    STRUCT = "struct"
    ARRAY = "array"


_FIXED = {
    Kind.INT8: struct.Struct(">b"),
    Kind.INT16: struct.Struct(">h"),
    Kind.INT32: struct.Struct(">i"),
    Kind.INT64: struct.Struct(">q"),
    Kind.BOOL: struct.Struct(">?"),
}


@dataclass(frozen=True)
class Spec:
    """One field's wire form: its kind, the versions it is present and nullable in, its tag if it is a tagged field,
    and for arrays and structs what they hold."""

    kind: Kind
    versions: Versions
    nullable: Versions
    tag: int | None = None
    tagged: Versions = Versions(1, 0)
    item: Kind | None = None  # an array's element kind (STRUCT for an array of structs)
    struct: type | None = None  # a struct's class, or an array's element class


def _field(spec: Spec, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"wire": spec})
    return dataclasses.field(default=default, metadata={"wire": spec})


def _spec(kind: Kind, versions: str, nullable: str = "none", tag: int | None = None, **kw: Any) -> Spec:
    tagged = Versions.parse(versions) if tag is not None else Versions(1, 0)
    return Spec(kind, Versions.parse(versions), Versions.parse(nullable), tag, tagged, **kw)


def int8(versions: str, default: int = 0, *, tag: int | None = None) -> Any:
    return _field(_spec(Kind.INT8, versions, tag=tag), default)


def int16(versions: str, default: int = 0, *, tag: int | None = None) -> Any:
    return _field(_spec(Kind.INT16, versions, tag=tag), default)


def int32(versions: str, default: int = 0, *, tag: int | None = None) -> Any:
    return _field(_spec(Kind.INT32, versions, tag=tag), default)


def int64(versions: str, default: int = 0, *, tag: int | None = None) -> Any:
    return _field(_spec(Kind.INT64, versions, tag=tag), default)


def boolean(versions: str, default: bool = False, *, tag: int | None = None) -> Any:
    return _field(_spec(Kind.BOOL, versions, tag=tag), default)


def uuid(versions: str, *, tag: int | None = None) -> Any:
    return _field(_spec(Kind.UUID, versions, tag=tag), ZERO_UUID)


def string(versions: str, default: str | None = "", *, nullable: str = "none", tag: int | None = None) -> Any:
    return _field(_spec(Kind.STRING, versions, nullable, tag), default)


def bytes_(versions: str, default: bytes | None = b"", *, nullable: str = "none") -> Any:
    return _field(_spec(Kind.BYTES, versions, nullable), default)


def records(versions: str, *, nullable: str = "none") -> Any:
    """A record set: bytes on the wire; the log's own bytes, never parsed here."""
    return _field(_spec(Kind.RECORDS, versions, nullable), None)


def struct_(cls: type, versions: str, *, tag: int | None = None) -> Any:
    """A nested struct; None (absent) by default: a tagged struct is written only when it is set."""
    return _field(_spec(Kind.STRUCT, versions, tag=tag, struct=cls), None)


def array(of: type | Kind, versions: str, *, nullable: str = "none", tag: int | None = None) -> Any:
    """An array of structs (``of`` a schema class) or of a primitive kind; an empty list by default."""
    if isinstance(of, Kind):
        spec = _spec(Kind.ARRAY, versions, nullable, tag, item=of)
    else:
        spec = _spec(Kind.ARRAY, versions, nullable, tag, item=Kind.STRUCT, struct=of)
    return _field(spec, factory=list)


_FIELDS: dict[type, tuple[tuple[str, Spec, Any], ...]] = {}


def schema_fields(cls: type) -> tuple[tuple[str, Spec, Any], ...]:
    """(name, spec, default) of a schema class's fields, in order."""
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("wire")
        if spec is None:
            raise TypeError(f"{cls.__name__}.{f.name} has no wire spec")
        default: Any = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out.append((f.name, spec, default))
    _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


# --- writing ----------------------------------------------------------------------------------------------------


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode(obj: Any, version: int, flexible: bool) -> bytes:
    """A schema instance's bytes at ``version`` (``flexible``: whether that version is one of the message's flexible
    versions)."""
    parts: list[bytes] = []
    _write_struct(parts, obj, version, flexible)
    return b"".join(parts)


def _write_struct(parts: list[bytes], obj: Any, version: int, flexible: bool) -> None:
    tagged: list[tuple[int, bytes]] = []
    for name, spec, default in schema_fields(type(obj)):
        if version not in spec.versions:
            continue
        value = getattr(obj, name)
        if spec.tag is not None and flexible and version in spec.tagged:
            if value is None or value == default:
                continue
            inner: list[bytes] = []
            _write_value(inner, spec, value, version, flexible)
            tagged.append((spec.tag, b"".join(inner)))
            continue
        _write_value(parts, spec, value, version, flexible)
    if flexible:
        parts.append(uvarint(len(tagged)))
        for tag, data in sorted(tagged):
            parts += [uvarint(tag), uvarint(len(data)), data]


def _write_length(parts: list[bytes], length: int | None, flexible: bool, wide: bool) -> None:
    """A length or count: None is null."""
    if flexible:
        parts.append(uvarint(0 if length is None else length + 1))
    elif wide:
        parts.append(_FIXED[Kind.INT32].pack(-1 if length is None else length))
    else:
        parts.append(_FIXED[Kind.INT16].pack(-1 if length is None else length))


def _write_value(parts: list[bytes], spec: Spec, value: Any, version: int, flexible: bool) -> None:
    kind = spec.kind
    fixed = _FIXED.get(kind)
    if fixed is not None:
        parts.append(fixed.pack(value))
    elif kind is Kind.UUID:
        if len(value) != 16:
            raise ValueError(f"a uuid is 16 bytes, not {len(value)}")
        parts.append(bytes(value))
    elif value is None:
        if version not in spec.nullable and kind is not Kind.STRUCT:
            raise ValueError(f"a null {kind.value} in version {version}, where it is not nullable")
        if kind is Kind.STRUCT:
            raise ValueError("a null struct outside a tagged field")
        _write_length(parts, None, flexible, kind is not Kind.STRING)
    elif kind is Kind.STRING:
        data = value.encode()
        _write_length(parts, len(data), flexible, wide=False)
        parts.append(data)
    elif kind in (Kind.BYTES, Kind.RECORDS):
        _write_length(parts, len(value), flexible, wide=True)
        parts.append(bytes(value) if not isinstance(value, bytes) else value)
    elif kind is Kind.STRUCT:
        _write_struct(parts, value, version, flexible)
    else:  # ARRAY
        _write_length(parts, len(value), flexible, wide=True)
        item = Spec(spec.item or Kind.STRUCT, spec.versions, Versions(1, 0), struct=spec.struct)
        for element in value:
            _write_value(parts, item, element, version, flexible)


# --- reading ----------------------------------------------------------------------------------------------------


class Reader:
    """A cursor over one message's bytes; every read past the end or of a malformed value is a WireError."""

    def __init__(self, data: bytes | memoryview, position: int = 0, end: int | None = None) -> None:
        self.data = memoryview(data)
        self.position = position
        self.end = len(self.data) if end is None else end

    def take(self, size: int) -> memoryview:
        if size < 0 or self.position + size > self.end:
            raise WireError(
                f"{size} bytes wanted at byte {self.position} of a {self.end}-byte message: it ends too soon"
            )
        start = self.position
        self.position += size
        return self.data[start : self.position]

    def fixed(self, kind: Kind) -> Any:
        s = _FIXED[kind]
        return s.unpack(self.take(s.size))[0]

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise WireError(f"a varint longer than 10 bytes at byte {self.position}")

    def length(self, flexible: bool, wide: bool) -> int | None:
        """A length or count; None for null."""
        if flexible:
            n = self.uvarint()
            return None if n == 0 else n - 1
        n = self.fixed(Kind.INT32 if wide else Kind.INT16)
        if n < -1:
            raise WireError(f"a negative length {n} at byte {self.position}")
        return None if n == -1 else n


def decode(cls: type, data: bytes | memoryview, version: int, flexible: bool, position: int = 0) -> tuple[Any, int]:
    """An instance of schema ``cls`` read from ``data`` at ``position``, and the position after it."""
    reader = Reader(data, position)
    return _read_struct(reader, cls, version, flexible), reader.position


def _read_struct(r: Reader, cls: type, version: int, flexible: bool) -> Any:
    values: dict[str, Any] = {}
    tagged: dict[int, tuple[str, Spec]] = {}
    for name, spec, _ in schema_fields(cls):
        if version not in spec.versions:
            continue
        if spec.tag is not None and flexible and version in spec.tagged:
            tagged[spec.tag] = (name, spec)
            continue
        values[name] = _read_value(r, spec, version, flexible)
    if flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            body = r.take(size)
            if tag in tagged:
                name, spec = tagged[tag]
                values[name] = _read_value(Reader(body), spec, version, flexible)
    return cls(**values)


def _read_value(r: Reader, spec: Spec, version: int, flexible: bool) -> Any:
    kind = spec.kind
    if kind in _FIXED:
        return r.fixed(kind)
    if kind is Kind.UUID:
        return bytes(r.take(16))
    if kind is Kind.STRUCT:
        assert spec.struct is not None
        return _read_struct(r, spec.struct, version, flexible)
    at = r.position
    n = r.length(flexible, wide=kind is not Kind.STRING)
    if n is None:
        if version not in spec.nullable:
            raise WireError(f"a null {kind.value} at byte {at}, not nullable in version {version}")
        return None
    if kind is Kind.STRING:
        try:
            return bytes(r.take(n)).decode()
        except UnicodeDecodeError:
            raise WireError(f"a string that is not UTF-8 at byte {at}") from None
    if kind in (Kind.BYTES, Kind.RECORDS):
        return bytes(r.take(n))
    item = Spec(spec.item or Kind.STRUCT, spec.versions, Versions(1, 0), struct=spec.struct)
    if n > r.end - r.position:  # every element takes at least a byte: a count past that is damage, not a request
        raise WireError(f"an array of {n} elements at byte {at}, more than the bytes left")
    return [_read_value(r, item, version, flexible) for _ in range(n)]


@dataclass(frozen=True)
class Api:
    """One API this endpoint answers: its key, its request and response schemas, the versions it serves and which
    of them are flexible (as the JSON's ``flexibleVersions``)."""

    key: int
    name: str
    request: type
    response: type
    served: Versions
    flexible: Versions
