"""The endpoint's wire code against two independent implementations of Kafka's message schemas, for every message
and every version it serves: kafka-python's (generated at run time from Kafka's own JSON definitions, which it
ships) and the Java client's (kafka-clients' generated ``*Data`` classes, the code brokers and clients run).

Each message is filled with values that differ field from field (every array two long, nullable fields null in
turn, tagged fields set) and encoded here; kafka-python must decode the same values, Kafka's Java classes must parse
it with no byte left over and write back exactly the same bytes; and what kafka-python encodes, this code must
decode to the same values.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import subprocess
import uuid
from typing import Any

import pytest
from client_envs import oracle_jars
from conftest import REPO, have_java

from migrate.serve.handlers import SERVED
from migrate.serve.header import parse_request_header, response_frame
from migrate.serve.wire import Kind, Spec, Versions, WireError, decode, encode, schema_fields

CASES = [
    (api, cls, version)
    for api in SERVED.values()
    for cls in (api.request, api.response)
    for version in range(api.served.low, api.served.high + 1)
]


def _ids(case: tuple) -> str:
    return f"{case[1].__name__}-v{case[2]}"


class Sampler:
    """Values that differ from field to field and from the defaults, deterministic."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return self.n

    def struct(self, cls: type, version: int) -> Any:
        values = {}
        for name, spec, _ in schema_fields(cls):
            if version in spec.versions:
                values[name] = self.value(spec, version)
        return cls(**values)

    def value(self, spec: Spec, version: int, in_array: bool = False) -> Any:
        k = self.next()
        nullable = version in spec.nullable
        if nullable and k % 4 == 0:
            return None
        if spec.kind == Kind.ARRAY and not in_array:
            item = Spec(spec.item or Kind.STRUCT, spec.versions, Versions(1, 0), struct=spec.struct)
            return [self.value(item, version, in_array=True) for _ in range(2)]
        if spec.kind == Kind.STRUCT:
            assert spec.struct is not None
            return self.struct(spec.struct, version)
        return {
            Kind.INT8: lambda: k % 100 + 1,
            Kind.INT16: lambda: k * 7 % 30000 + 1,
            Kind.INT32: lambda: k * 1000 + 7,
            Kind.INT64: lambda: k * 10**10 + 11,
            Kind.BOOL: lambda: k % 2 == 0,
            Kind.UUID: lambda: bytes((k + i) % 256 for i in range(16)),
            Kind.STRING: lambda: f"s{k}-é",
            Kind.BYTES: lambda: bytes([k % 256]) * (k % 5 + 1),
            Kind.RECORDS: lambda: bytes([k % 256]) * (k % 9 + 1),
        }[spec.kind]()


def sample(cls: type, version: int) -> Any:
    made = Sampler().struct(cls, version)
    if cls.__name__ == "ApiVersionsResponse":
        # a response with an error is read as version 0 (KIP-511: it must be readable by any client), by
        # kafka-python as by Kafka; the sample's other fields are then only checked in version 0
        made = dataclasses.replace(made, error_code=0)
    return made


# kafka-python names a struct's AuthorizedOperations field without the struct's prefix
KAFKA_PYTHON_NAMES = {
    "topic_authorized_operations": "authorized_operations",
    "cluster_authorized_operations": "authorized_operations",
}


def _kafka_python_classes() -> dict[str, Any]:
    import kafka.protocol as kp
    from kafka.protocol.api_message import ApiMessage

    out: dict[str, Any] = {}
    for m in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        try:
            mod = importlib.import_module(m.name)
        except Exception:
            continue
        for v in vars(mod).values():
            if isinstance(v, type) and issubclass(v, ApiMessage) and v is not ApiMessage and getattr(v, "_json", None):
                message: Any = v
                out[message.name] = message
    return out


KAFKA_PYTHON = _kafka_python_classes()


def _plain(value: Any) -> Any:
    """kafka-python's view of a value, in this code's terms: uuids as 16 bytes, authorized operations (a set of bit
    numbers there) as their 32-bit field."""
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, (set, frozenset)):
        field = sum(1 << b for b in value)
        return field - (1 << 32) if field >= 1 << 31 else field
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _same(ours: Any, theirs: Any, version: int, where: str) -> list[str]:
    """Every field of ``ours`` present in ``version``, compared with ``theirs`` (a kafka-python object)."""
    problems = []
    for name, spec, _ in schema_fields(type(ours)):
        if version not in spec.versions:
            continue
        a, b = getattr(ours, name), _plain(getattr(theirs, KAFKA_PYTHON_NAMES.get(name, name)))
        if spec.kind == Kind.STRUCT or (spec.kind == Kind.ARRAY and spec.item == Kind.STRUCT):
            if a is None or b is None:
                if not (a is None and (b is None or b == [] or spec.tag is not None)):
                    problems.append(f"{where}.{name}: {a!r} != {b!r}")
                continue
            if spec.kind == Kind.STRUCT:
                problems += _same(a, b, version, f"{where}.{name}")
                continue
            if len(a) != len(b):
                problems.append(f"{where}.{name}: {len(a)} elements, kafka-python {len(b)}")
                continue
            for i, (x, y) in enumerate(zip(a, b)):
                problems += _same(x, y, version, f"{where}.{name}[{i}]")
        elif a != b:
            problems.append(f"{where}.{name}: {a!r} != {b!r}")
    return problems


def _to_kafka_python(kp_cls: type, ours: Any, version: int) -> Any:
    """The same message built with kafka-python's classes (nested classes by their JSON type names)."""
    values: dict[str, Any] = {}
    for name, spec, _ in schema_fields(type(ours)):
        if version not in spec.versions:
            continue
        value = getattr(ours, name)
        if value is None:
            values[name] = None
        elif spec.kind == Kind.STRUCT:
            assert spec.struct is not None
            values[name] = _to_kafka_python(getattr(kp_cls, spec.struct.__name__), value, version)
        elif spec.kind == Kind.ARRAY and spec.item == Kind.STRUCT:
            assert spec.struct is not None
            nested = getattr(kp_cls, spec.struct.__name__)
            values[name] = [_to_kafka_python(nested, v, version) for v in value]
        elif spec.kind == Kind.UUID:
            values[name] = uuid.UUID(bytes=value)
        elif name in KAFKA_PYTHON_NAMES:  # authorized operations: kafka-python takes the set of bits set
            values[name] = {b for b in range(32) if value & (1 << b)}
        else:
            values[name] = value
    values = {KAFKA_PYTHON_NAMES.get(k, k): v for k, v in values.items()}
    return kp_cls(version=version, **values) if hasattr(kp_cls, "API_KEY") else kp_cls(**values)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_kafka_python_reads_what_this_code_writes_and_the_reverse(case):
    api, cls, version = case
    flexible = version in api.flexible
    ours = sample(cls, version)
    data = encode(ours, version, flexible)
    kp_cls = KAFKA_PYTHON[cls.__name__]
    theirs = kp_cls.decode(data, version=version)
    assert _same(ours, theirs, version, cls.__name__) == []
    written = _to_kafka_python(kp_cls, ours, version).encode(version=version)
    back, end = decode(cls, written, version, flexible)
    assert end == len(written)
    assert back == ours


@pytest.fixture(scope="module")
def kafka_java(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``java`` and the class path of the round trip through Kafka's generated classes."""
    if not have_java():
        pytest.skip(reason="the Java check needs java and javac 17+, which are not on the PATH")
    jars = oracle_jars()
    classes = tmp_path_factory.mktemp("wire-java")
    source = REPO / "tests" / "java" / "WireRoundTrip.java"
    subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", f"{jars}/*", str(source)], check=True, timeout=300)
    return ["java", "-cp", f"{classes}:{jars}/*", "WireRoundTrip"]


@pytest.mark.oracle
def test_kafkas_own_message_classes_read_what_this_code_writes_and_write_it_back_byte_for_byte(kafka_java):
    lines, written = [], []
    for api, cls, version in CASES:
        data = encode(sample(cls, version), version, version in api.flexible)
        lines.append(f"{cls.__name__}Data {version} {data.hex()}")
        written.append(data.hex())
    done = subprocess.run(kafka_java, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    answers = done.stdout.splitlines()
    assert len(answers) == len(CASES)
    wrong = [
        f"{_ids(case)}: {answer if answer.startswith('error') else 'written back differently'}"
        for case, answer, ours in zip(CASES, answers, written)
        if answer != ours
    ]
    assert wrong == []


def test_request_headers_of_every_version_parse():
    from kafka.protocol.consumer.fetch import FetchRequest

    for version, flexible in ((11, False), (12, True), (16, True)):
        kp = FetchRequest(version=version, max_wait_ms=1, min_bytes=1, topics=[])
        kp.with_header(correlation_id=77, client_id="cli-é")
        frame = kp.encode(version=version, header=True)
        header = parse_request_header(frame, flexible)
        assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
            1,
            version,
            77,
            "cli-é",
        )
        request, end = decode(type(sample(SERVED[1].request, version)), frame, version, flexible, header.size)
        assert end == len(frame) and request.max_wait_ms == 1


def test_a_response_frame_is_what_kafka_python_reads():
    from kafka.protocol.metadata.api_versions import ApiVersionsResponse

    body = encode(sample(SERVED[18].response, 3), 3, True)
    frame = response_frame(5, body, flexible_header=False)  # ApiVersions answers with header v0, flexible or not
    parsed = ApiVersionsResponse.decode(frame[8:], version=3)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4 and int.from_bytes(frame[4:8], "big") == 5
    assert len(parsed.api_keys) == 2


@pytest.mark.parametrize(
    "damaged",
    [b"", b"\x00\x01", b"\xff" * 40, bytes(range(30))],
    ids=["empty", "short", "all-ff", "counting"],
)
def test_malformed_bytes_are_the_codecs_own_error(damaged):
    api = SERVED[1]
    with pytest.raises(WireError):
        decode(api.request, damaged, 12, True)


def test_every_served_schema_has_kafka_pythons_fields_in_every_served_version():
    """The field lists themselves: a field Kafka's JSON has at a version and this code lacks (or the reverse)."""
    for _, cls, version in CASES:
        kp_cls = KAFKA_PYTHON[cls.__name__]
        theirs = [f.name for f in kp_cls._struct._fields if version in range(f._versions[0], f._versions[1] + 1)]
        ours = [KAFKA_PYTHON_NAMES.get(n, n) for n, spec, _ in schema_fields(cls) if version in spec.versions]
        assert ours == theirs, f"{cls.__name__} v{version}"
