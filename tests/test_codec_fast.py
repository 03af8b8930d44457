"""The generated record codec (issue 26) against the generic one it replaced, kept here as the reference.

``migrate.codec`` builds one encoder and one decoder per record class; ``reference_to_json``/``reference_from_json``
below are the codec as it was before, walking every value. On the project's records, and on hypothesis-mutated JSON
of them (a value replaced, a key dropped or added), both must give the same records, the same JSON, or the same
ModelError message. Classes whose ``__init__`` is not @dataclass's own, with slots, InitVars or awkward field names,
take the general path and must behave the same too.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import inspect
import json
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migrate.codec import _init_defaults, from_json, to_json
from migrate.errors import ModelError
from migrate.kafka.names import FileKind
from migrate.model.plan_tree import (
    OMIT_IF_NONE,
    Codec,
    ConvertOptions,
    DigestAlgorithm,
    ExchangeMethod,
    Plan,
    SegmentSplit,
    SplitCut,
    TailDrop,
    TimestampPolicy,
)
from migrate.model.run_state import (
    ConversionStatus,
    DirIdentity,
    FileStat,
    LogDirPhase,
    LogDirStatus,
    Outcome,
    PartitionState,
    PartitionStatus,
    Problem,
    RangeProgress,
    SegmentOutcome,
    SegmentResult,
    SplitPart,
)
from migrate.model.segment_files import SegmentFiles
from migrate.run.partition.record import ConvertedSegment, ExchangeRecord, LinkedFile
from migrate.watch.events import SegmentFinished, plan_event

# --- the reference: migrate/codec.py's to_json and from_json before issue 26 ---------------------------------------
# (since then taught each field's ``json_key`` and int-keyed mappings, as the codec was)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _keys(cls: type) -> dict[str, str]:
    return {f.name: f.metadata.get("json_key", f.name) for f in dataclasses.fields(cls)}


@functools.cache
def _omitted_if_none(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("omit_if_none"))


def reference_to_json(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value.value if isinstance(value, enum.Enum) else value
    if hasattr(type(value), "__to_wire__"):  # written as another value (the hooks migrate.codec's docstring names)
        return reference_to_json(value.__to_wire__())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        keys = _keys(type(value))
        out = {keys[name]: reference_to_json(getattr(value, name)) for name in _field_names(type(value))}
        for name in _omitted_if_none(type(value)):
            if out[keys[name]] is None:
                del out[keys[name]]
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [reference_to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): reference_to_json(v) for k, v in value.items()}
    return value


def _enum_member(kind: type[enum.Enum], value: Any, where: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise ModelError(f"{where}: {value!r} is not one of {allowed}") from None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, vars(sys.modules[cls.__module__]))


def reference_from_json(cls: type, data: Any, where: str = "") -> Any:
    return _decoder(cls)(data, where or cls.__name__)


def _where(path: Any) -> str:
    keys = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    return path + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in reversed(keys))


@functools.cache
def _decoder(tp: Any) -> Callable[[Any, Any], Any]:
    owner = get_origin(tp) or tp
    if isinstance(owner, type) and hasattr(owner, "__from_wire__"):
        decode_wire = _decoder(owner.__wire_type__(*get_args(tp)))

        def wire(data: Any, where: Any) -> Any:
            value = decode_wire(data, where)
            try:
                return owner.__from_wire__(value)
            except (TypeError, ValueError) as exc:
                raise ModelError(f"{_where(where)}: {exc}") from exc

        return wire
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        nullable = len(args) < len(get_args(tp))
        options = [_decoder(a) for a in args]

        def union(data: Any, where: Any) -> Any:
            if data is None and nullable:
                return None
            errors = []
            for option in options:
                try:
                    return option(data, where)
                except ModelError as exc:
                    errors.append(str(exc))
            raise ModelError(errors[0] if len(errors) == 1 else f"{_where(where)}: {data!r} fits none of {tp}")

        return union
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        spec = [
            (
                f.metadata.get("json_key", f.name),
                f.name,
                _decoder(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(tp)
        ]
        names = frozenset(key for key, _, _, _ in spec)

        def record(data: Any, where: Any) -> Any:
            if not isinstance(data, dict):
                raise ModelError(f"{_where(where)}: expected an object, found {type(data).__name__}")
            if not names.issuperset(data):
                unknown = sorted(set(data) - names)[0]
                raise ModelError(f"{_where(where)}: unknown key {unknown!r} (known: {', '.join(sorted(names))})")
            kwargs = {}
            for key, name, decode, required in spec:
                if key in data:
                    kwargs[name] = decode(data[key], (where, key))
                elif required:
                    raise ModelError(f"{_where(where)}: missing key {key!r}")
            try:
                return tp(**kwargs)
            except ModelError:
                raise
            except (TypeError, ValueError) as exc:
                raise ModelError(f"{_where(where)}: {exc}") from exc

        return record
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return lambda data, where: _enum_member(tp, data, _where(where))
    origin = get_origin(tp)
    if origin is tuple or origin is Sequence:
        (item,) = [a for a in get_args(tp) if a is not Ellipsis]
        decode_item = _decoder(item)

        def sequence(data: Any, where: Any) -> Any:
            if not isinstance(data, list):
                raise ModelError(f"{_where(where)}: expected a list, found {type(data).__name__}")
            return tuple(decode_item(v, (where, i)) for i, v in enumerate(data))

        return sequence
    if origin is dict:
        decode_value = _decoder(get_args(tp)[1])
        int_keys = get_args(tp)[0] is int

        def key_of(k: Any, where: Any) -> Any:
            if not int_keys:
                return str(k)
            if isinstance(k, int) or (isinstance(k, str) and k.lstrip("-").isdigit() and str(int(k)) == k):
                return int(k)
            raise ModelError(f"{_where((where, k))}: expected an integer key, found {k!r}")

        def mapping(data: Any, where: Any) -> Any:
            if not isinstance(data, dict):
                raise ModelError(f"{_where(where)}: expected an object, found {type(data).__name__}")
            out = {}
            for k, v in data.items():
                key = key_of(k, where)
                out[key] = decode_value(v, (where, k))
            return out

        return mapping
    if tp is Any:
        return lambda data, where: data
    if tp is bool:
        return _scalar(lambda d: isinstance(d, bool), "true or false")
    if tp is int:
        return _scalar(lambda d: isinstance(d, int) and not isinstance(d, bool), "an integer")
    if tp is float:

        def number(data: Any, where: Any) -> float:
            if not isinstance(data, (int, float)) or isinstance(data, bool):
                raise ModelError(f"{_where(where)}: expected a number, found {data!r}")
            return float(data)

        return number
    if tp is str:
        return _scalar(lambda d: isinstance(d, str), "a string")
    raise ModelError(f"the model has no decoder for {tp}")


def _scalar(check: Callable[[Any], bool], what: str) -> Callable[[Any, Any], Any]:
    def scalar(data: Any, where: Any) -> Any:
        if not check(data):
            raise ModelError(f"{_where(where)}: expected {what}, found {data!r}")
        return data

    return scalar


# --- comparing the two ------------------------------------------------------------------------------------------


def decoded(decode: Callable[..., Any], cls: type, data: Any, where: str = "") -> tuple[str, str]:
    """What decoding gave, comparable across codecs: the record's repr (1 and 1.0, True and 1 differ) and its JSON,
    or the error's type and message."""
    try:
        record = decode(cls, copy.deepcopy(data), where)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return repr(record), json.dumps(reference_to_json(record), sort_keys=True)


def assert_same(cls: type, data: Any, where: str = "") -> tuple[str, str]:
    ours = decoded(from_json, cls, data, where)
    assert ours == decoded(reference_from_json, cls, data, where)
    return ours


def result(i: int, **changes: Any) -> SegmentResult:
    sfx = (FileKind.LOG, FileKind.INDEX, FileKind.TIME_INDEX)
    fields: dict[str, Any] = dict(
        source=f"/data/t-0/{i:020d}.log",
        base_offset=i,
        status=ConversionStatus.CONVERTED,
        outputs=SegmentFiles.of((s, f"/data/staging/t-0/{i:020d}{s.value}") for s in sfx),
        output_stats=SegmentFiles.of((s, FileStat(100 + i, 196 + k, 1_500_000_000 * 10**9)) for k, s in enumerate(sfx)),
        live_before=SegmentFiles.of((s, FileStat(200 + i, 112 + k, 1_500_000_000 * 10**9)) for k, s in enumerate(sfx)),
        first_offset=i,
        last_offset=i + 1,
        magics_in={"0": 2},
        digest=DigestAlgorithm.XXH3_128,
        source_digest="ab" * 16,
        digest_splits=(i + 1, i + 5),
        seconds=0.25,
    )
    fields.update(changes)
    return SegmentResult(**fields)


def samples() -> list[tuple[type, Any]]:
    """Records of every kind the project writes down: plans, state rows, swap records, events."""
    example = json.loads((REPO / "plans" / "example-plan.json").read_text())
    plan = from_json(Plan, example, "plan")
    cutover = json.loads((REPO / "plans" / "example-cutover-plan.json").read_text())
    split = SplitPart(7, SegmentFiles(log="/s/7.log"), SegmentFiles(log=FileStat(1, 2, 3)), 9, 3)
    outcome = SegmentOutcome(
        "/data",
        "t-0",
        0,
        Outcome.REFUSED,
        problem=Problem("corrupt", "bad crc", "/data/t-0/0.log", 12, 3),
        result=result(0, parts=(split,)),
        staged_seconds=1.5,
    )
    return [
        (Plan, example),
        (Plan, cutover),
        (SegmentResult, to_json(result(4))),
        (SegmentOutcome, to_json(outcome)),
        (SegmentFinished, to_json(SegmentFinished("p1", outcome, 5, True, 2))),
        (SegmentFinished, to_json(SegmentFinished(None, RangeProgress("/data", "t-0", 0, 1, 4, 100)))),
        (type(plan_event(plan)), to_json(plan_event(plan))),
        (
            LogDirStatus,
            to_json(
                LogDirStatus(
                    "/data",
                    LogDirPhase.EXECUTING,
                    True,
                    (PartitionStatus("/data", "t-0", PartitionState.FAILED, {"verified": 3}, Problem("bug", "x")),),
                    ("finalized at ...",),
                    running="execute, pid 1",
                )
            ),
        ),
        (
            ExchangeRecord,
            to_json(
                ExchangeRecord(
                    1,
                    "p1",
                    "t-0",
                    ExchangeMethod.EXCHANGE,
                    DirIdentity(1, 2, 0o755, 0, 0, 3),
                    DirIdentity(1, 4),
                    (LinkedFile("partition.metadata", 5, 6, 7),),
                    (ConvertedSegment(0, result(0)),),
                )
            ),
        ),
        (
            ConvertOptions,
            to_json(ConvertOptions(compression=Codec.GZIP, pack_bytes=1000, timestamps=TimestampPolicy.NONE)),
        ),
        (SegmentSplit, to_json(SegmentSplit(3, (SplitCut(10, 100), SplitCut(20, 200))))),
        (TailDrop, to_json(TailDrop(1, 2, None, 4))),
    ]


SAMPLES = samples()


@pytest.mark.parametrize("cls, data", SAMPLES, ids=[f"{i}-{c.__name__}" for i, (c, _) in enumerate(SAMPLES)])
def test_records_decode_and_encode_as_the_reference_does(cls, data):
    record = from_json(cls, data, "x")
    assert repr(record) == repr(reference_from_json(cls, data, "x"))
    assert to_json(record) == reference_to_json(record) == data
    assert list(to_json(record)) == list(data)  # key order too: plan files and plan ids depend on it
    assert json.dumps(to_json(record)) == json.dumps(data)


def _paths(node: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*path, i))
    return out


def _leaves(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [x for v in node.values() for x in _leaves(v)]
    if isinstance(node, list):
        return [x for v in node for x in _leaves(v)]
    return [node]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False)
    | st.text(max_size=6)
    | st.sampled_from(["mtime", "gzip", "zstd", "sha256", "converted", "refused", "failed", ".log"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[type, Any]:
    """One sample record's JSON with one to three values replaced, keys dropped or unknown keys added."""
    cls, data = draw(st.sampled_from(SAMPLES))
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(data)))
        kind = draw(st.sampled_from(["replace", "replace", "sibling", "drop", "add"]))
        if not path:
            if kind in ("replace", "sibling"):
                data = draw(json_values)
            continue
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if kind == "replace":
            parent[key] = draw(json_values)
        elif kind == "sibling":  # a value of the right shape from elsewhere: often valid, sometimes not
            leaves = _leaves(data)
            if leaves:  # a record mutated down to empty containers has none
                parent[key] = copy.deepcopy(draw(st.sampled_from(leaves)))
        elif kind == "drop":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from([*parent, "colour", ""]))] = draw(json_values)
        else:
            parent.insert(key, draw(json_values))
    return cls, data


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_records_give_the_reference_records_or_its_messages(case):
    cls, data = case
    assert_same(cls, data, "rec")


@pytest.mark.parametrize(
    "cls, data, message",
    [
        (SegmentResult, [], "row: expected an object, found list"),
        (SegmentResult, {**to_json(result(1)), "colour": 1}, "row: unknown key 'colour' (known: base_offset,"),
        (
            SegmentResult,
            {**to_json(result(1)), "base_offset": True},
            "row.base_offset: expected an integer, found True",
        ),
        (SegmentResult, {**to_json(result(1)), "seconds": "1"}, "row.seconds: expected a number, found '1'"),
        (SegmentResult, {**to_json(result(1)), "digest": "md5"}, "row.digest: 'md5' is not one of sha256, xxh3-128"),
        (SegmentResult, {**to_json(result(1)), "digest": [1]}, "row.digest: [1] is not one of sha256, xxh3-128"),
        (SegmentResult, {**to_json(result(1)), "magics_in": {"0": 2.0}}, "row.magics_in.0: expected an integer"),
        (SegmentResult, {**to_json(result(1)), "digest_splits": [1, None]}, "row.digest_splits[1]: expected an int"),
        (
            SegmentResult,
            {**to_json(result(1)), "first_offset": "1"},
            "row.first_offset: expected an integer, found '1'",
        ),
        (SegmentResult, {"source": "s", "base_offset": 1}, "row: missing key 'status'"),
        (
            SegmentResult,
            {**to_json(result(1)), "output_stats": {".log": {"inode": 1, "size": 2}}},
            "row.output_stats..log: missing key 'mtime_ns'",
        ),
        (ConvertOptions, {"target_magic": 3}, "options.target_magic: must be 1 or 2, not 3"),
        (ConvertOptions, {"compression": "lz5"}, "row.compression: 'lz5' is not one of none, gzip, snappy, lz4, zstd"),
        (ConvertOptions, {"pack_bytes": 0}, "options.pack_bytes: needs target magic 2 and a positive size"),
        (SegmentFinished, {"plan_id": None, "progress": {"log_dir": 1}}, "fits none of"),
        (TailDrop, {"position": 1, "bytes": 2, "last_kept_offset": 1.5, "claimed_offset": None}, "expected an integer"),
    ],
)
def test_bad_input_is_refused_with_the_reference_message(cls, data, message):
    kind, text = assert_same(cls, data, "row")
    assert kind == "ModelError" and message in text


def test_scalars_enums_and_containers_decode_at_the_top_as_the_reference_does():
    cases = [
        (int, 5),
        (int, True),
        (int, 1.0),
        (float, 3),
        (float, 2.5),
        (float, False),
        (bool, 0),
        (str, b"x"),
        (Codec, "lz4"),
        (Codec, Codec.LZ4),
        (Codec, None),
        (tuple[int, ...], [1, 2]),
        (tuple[int, ...], (1, 2)),
        (tuple[float, ...], [1, 2.5]),
        (dict[str, int], {"a": 1}),
        (dict[str, int], [("a", 1)]),
        (dict[str, FileStat], {"x": {"inode": 1, "size": 2, "mtime_ns": 3}}),
        (int | None, None),
        (int | str, 1.5),
        (Any, {"x": [1]}),
    ]
    for tp, data in cases:
        assert decoded(from_json, tp, data, "v") == decoded(reference_from_json, tp, data, "v"), (tp, data)


# --- classes off the generated fast path, and values of other types than declared -----------------------------------


class Colour(enum.Enum):
    RED = (255, 0, 0)
    NONE = None


class Size(enum.IntEnum):
    SMALL = 1


@dataclass(frozen=True)
class Awkward:
    """Field names that clash with generated locals and builtins, a default factory, a __post_init__ that refuses."""

    type: str
    data: int
    where: str = "here"
    obj: tuple[int, ...] = field(default_factory=tuple)
    str: dict[str, int] = field(default_factory=dict)
    exc: float | None = field(default=None, metadata=OMIT_IF_NONE)

    def __post_init__(self) -> None:
        if self.data < 0:
            raise ValueError("data must not be negative")
        if self.data == 13:
            raise TypeError("unlucky")
        if self.data == 7:
            raise ModelError("seven is refused")


@dataclass(frozen=True, slots=True)
class Slotted:
    a: int
    b: tuple[str, ...] = ()


@dataclass
class OwnInit:
    a: int
    b: int = 0

    def __init__(self, a: int, b: int = 0) -> None:
        self.a = a * 2
        self.b = b


@dataclass
class WithInitVar:
    a: int
    scale: InitVar[int] = 1

    def __post_init__(self, scale: int) -> None:
        self.a *= scale


@dataclass
class Watched:
    """A __setattr__ of its own, which __init__ goes through."""

    a: int
    b: int = 0

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value * 10 if name == "a" else value)


@dataclass
class OwnDefaults:
    """An __init__ of its own whose defaults differ from the fields'."""

    a: int
    b: int = 0

    def __init__(self, a: int, b: int = 5) -> None:
        self.a = a
        self.b = b


@dataclass
class RequiresDefaulted:
    """An __init__ of its own that requires a field that has a default."""

    a: int = 0

    def __init__(self, a: int) -> None:
        self.a = a


@dataclass(frozen=True, kw_only=True)
class KeywordOnly:
    a: int
    b: str = "x"


@dataclass(frozen=True)
class Holder:
    awkward: Awkward | None = None
    slotted: tuple[Slotted, ...] = ()
    own: OwnInit | None = None
    initvar: WithInitVar | None = None
    colour: Colour | None = None


@pytest.mark.parametrize(
    "cls, data",
    [
        (Awkward, {"type": "t", "data": 1}),
        (Awkward, {"type": "t", "data": 1, "obj": [1, 2], "str": {"k": 3}, "exc": 2}),
        (Awkward, {"type": "t", "data": -1}),
        (Awkward, {"type": "t", "data": 13}),
        (Awkward, {"type": "t", "data": 7}),
        (Awkward, {"type": "t", "data": 1, "exc": None}),
        (Awkward, {"type": 1, "data": 1}),
        (Slotted, {"a": 1, "b": ["x"]}),
        (Slotted, {"a": 1, "b": [1]}),
        (OwnInit, {"a": 2}),
        (WithInitVar, {"a": 2}),
        (WithInitVar, {"a": 2, "scale": 3}),
        (Watched, {"a": 3}),
        (OwnDefaults, {"a": 3}),
        (OwnDefaults, {"a": 3, "b": 1}),
        (RequiresDefaulted, {}),
        (RequiresDefaulted, {"a": 2}),
        (KeywordOnly, {"a": 1}),
        (KeywordOnly, {"b": "y"}),
        (KeywordOnly, {"a": 1, "b": 2}),
        (Holder, {"awkward": {"type": "t", "data": 13}}),
        (Holder, {"slotted": [{"a": 1}, {"a": "x"}], "own": {"a": 1}, "initvar": {"a": 4}}),
        (Holder, {"colour": [255, 0, 0]}),
        (Holder, {"colour": None}),
        (Holder, {"colour": "red"}),
    ],
)
def test_classes_off_the_fast_path_decode_as_the_reference_does(cls, data):
    assert_same(cls, data, "v")


def test_records_are_built_by_their_own_init_as_before():
    # which classes these tests call with every field in order, and which with keywords as before
    fields = lambda cls: [f.name for f in dataclasses.fields(cls)]  # noqa: E731
    empty = inspect.Parameter.empty
    assert _init_defaults(Awkward, fields(Awkward))[:3] == [empty, empty, "here"]
    assert _init_defaults(Awkward, fields(Awkward))[-1] is None
    assert _init_defaults(WithInitVar, fields(WithInitVar)) is None
    assert _init_defaults(KeywordOnly, fields(KeywordOnly)) is None
    assert _init_defaults(Plan, fields(Plan)) is not None
    built = from_json(Awkward, {"type": "t", "data": 1, "obj": [1]}, "v")
    assert built == Awkward("t", 1, obj=(1,))
    assert from_json(Awkward, {"type": "t", "data": 1}, "v").str is not from_json(Awkward, {"type": "t", "data": 1}).str
    assert from_json(Watched, {"a": 3}, "v").a == Watched(3).a == 30
    assert from_json(OwnInit, {"a": 3}, "v") == OwnInit(3) and OwnInit(3).a == 6
    assert from_json(OwnDefaults, {"a": 1}, "v").b == OwnDefaults(1).b == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.data = 2  # type: ignore[misc]


class Pages(Sequence):
    """A lazy sequence, as segments may come."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if not 0 <= i < self.n:
            raise IndexError(i)
        return TailDrop(i, i, None, Size.SMALL)


class Weird:
    pass


@dataclass
class Loose:
    """Values of other types than declared pass through to_json by their own types' rules."""

    a: Any
    b: int = 0
    c: str | None = field(default=None, metadata=OMIT_IF_NONE)


class Tag(str):
    pass


class NamedStr(str, enum.Enum):
    A = "a"

    def __str__(self) -> str:
        return "custom"


@pytest.mark.parametrize(
    "value",
    [
        None,
        1,
        1.5,
        True,
        "s",
        Tag("t"),
        Size.SMALL,
        Colour.RED,
        Colour.NONE,
        Codec.GZIP,
        b"bytes",
        bytearray(b"ba"),
        Weird,
        Loose,
        (1, (2, [3])),
        {1: Codec.ZSTD, NamedStr.A: 2, Tag("k"): 3, (1, 2): None},
        types.MappingProxyType({"a": (1,)}),
        Loose(Colour.NONE, c=None),
        Loose(Colour.NONE, b=Size.SMALL, c=Tag("x")),
        Loose(Colour.RED, b=True, c=NamedStr.A),
        Loose({"k": [TailDrop(1, 2, 3, 4)]}, b=1.5),
        Awkward("t", 1, str={"x": 1}),
        Holder(Awkward("t", 1), (Slotted(1, ("a",)),), OwnInit(1), WithInitVar(2), Colour.RED),
        [result(3), SegmentOutcome("/d", "p", 0, Outcome.SKIPPED)],
    ],
    ids=repr,
)
def test_to_json_gives_what_the_reference_gives(value):
    ours = to_json(value)
    assert ours == reference_to_json(value)
    assert repr(ours) == repr(reference_to_json(value))  # 1 and True, 1 and 1.0, key order


def test_to_json_writes_any_sequence_as_a_list_but_keeps_byte_strings():
    assert to_json(Pages(2)) == [to_json(TailDrop(0, 0, None, 1)), to_json(TailDrop(1, 1, None, 1))]
    assert to_json(Pages(2))[0]["claimed_offset"] == 1 and type(to_json(Pages(1))[0]["claimed_offset"]) is int
    assert to_json(Loose(Pages(1))) == {
        "a": [{"position": 0, "bytes": 0, "last_kept_offset": None, "claimed_offset": 1}],
        "b": 0,
    }
    assert to_json(range(3)) == [0, 1, 2]
    assert to_json(b"ab") == b"ab" and to_json(bytearray(b"ab")) == bytearray(b"ab")
    assert to_json(memoryview(b"ab")).tobytes() == b"ab"
    assert to_json("abc") == "abc"
