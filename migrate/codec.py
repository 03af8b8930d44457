"""The strict JSON codec of the project's records, and the JSON schema generator beside it.

``to_json`` turns a frozen dataclass (enums by value, tuples and other sequences as lists) into plain JSON data;
``from_json`` builds one back, rejecting unknown keys, missing fields and wrong types with the path of the offending
value (a ModelError), so a plan, a state row or an event that crossed a process boundary is either the record it
claims to be or refused.
``json_schema`` describes the same records for operators' tools (``plans/plan.schema.json``). Nothing here knows
the plan: ``migrate.model`` is the vocabulary, this is how it is written down.

A class whose JSON is another value's (a typed record written as the mapping it replaced, so that what older code
wrote still reads) says so with three hooks: ``value.__to_wire__()`` gives the value written in its place;
``cls.__wire_type__(*type_args)`` the type hint that value is read as (``type_args``: of a generic alias such as
``SegmentFiles[FileStat]``); ``cls.__from_wire__(decoded)`` builds the record from it (a ValueError or TypeError is
refused as a ModelError with its path).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import json
import keyword
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import orjson

from migrate.errors import ModelError

T = TypeVar("T")


def enum_member(kind: type[enum.Enum], value: Any, where: str) -> Any:
    """``kind(value)``, or a ModelError that names where the value stood and lists the allowed ones."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise ModelError(f"{where}: {value!r} is not one of {allowed}") from None


# --- speed ----------------------------------------------------------------------------------------------------------
# A broker holds up to a million segments, and its plan, state rows and events all pass through here: one generic
# walk per value (an isinstance chain, dataclasses.fields, a dict comprehension per record) cost more than parsing
# the JSON itself. So each record class gets its own encoder and decoder, generated once as Python source: fields
# are read by name, a scalar is copied or checked after one exact-type test, nested values are dispatched on their
# exact type through a table, containers are decoded in place, and a record is built by one positional call of its
# class (``_init_defaults``). The behaviour is the generic one's, value for value and message for message
# (tests/test_codec_fast.py holds the generic codec and compares them).


def _compile(name: str, lines: list[str], namespace: dict[str, Any], label: str = "") -> Any:
    # the source holds no text from data: field names appear as repr() literals or checked identifiers, other values
    # through the namespace; ``label`` names it in tracebacks and profiles
    exec(compile("\n".join(lines) + "\n", f"<migrate.codec {label or name}>", "exec"), namespace)
    return namespace[name]


def _attribute_names(names: tuple[str, ...]) -> bool:
    """Field names that can be read as ``value.name`` in generated source (locals there are ``_c_...``)."""
    return all(n.isidentifier() and not keyword.iskeyword(n) for n in names)


# --- encoding -------------------------------------------------------------------------------------------------------

Encoder = Callable[[Any], Any]

# the JSON scalars: copied as they are when their type is exactly one of these (a subclass such as a str enum goes
# through its own encoder)
_PLAIN: frozenset[type] = frozenset({str, int, float, bool, type(None)})


def _same(value: Any) -> Any:
    return value


def _enum_value(value: Any) -> Any:
    return value.value


# the encoder of each type met so far, found by the exact type of a value (to_json's rules depend on the type alone)
_encoders: dict[type, Encoder] = dict.fromkeys(_PLAIN, _same)

# one value's encoding, inlined in generated source (``{v}`` is a local name holding the value): to_json without
# its call
_ENCODE = "({v} if type({v}) in _c_plain else (_c_get(type({v})) or _c_new(type({v})))({v}))"


def to_json(value: Any) -> Any:
    """A model record as plain JSON data (enums by value, tuples, lists and other sequences as lists, dataclasses and
    mappings as objects); anything else is returned as it is."""
    encode = _encoders.get(type(value))
    if encode is None:
        encode = _encoder(type(value))
    return encode(value)


def _encoder(cls: type) -> Encoder:
    """The encoder of values of exactly ``cls``, made once. The order of the tests is the rules' order."""
    encode: Encoder
    if issubclass(cls, (str, int, float, bool)) or cls is type(None):
        encode = _enum_value if issubclass(cls, enum.Enum) else _same
    elif _wire_class(cls) is not None:
        encode = _wire_encoder(cls)
    elif hasattr(cls, "__dataclass_fields__") and not issubclass(cls, type):
        encode = _record_encoder(cls)
    elif issubclass(cls, enum.Enum):
        encode = _enum_value
    elif issubclass(cls, (list, tuple)):
        encode = _sequence_encoder()
    elif issubclass(cls, Mapping):
        encode = _mapping_encoder()
    elif issubclass(cls, Sequence) and not issubclass(cls, (bytes, bytearray, memoryview)):
        # a lazy sequence (of segments, say) is written as the list it stands for; byte strings stay as they are
        encode = _sequence_encoder()
    else:
        encode = _same
    _encoders[cls] = encode
    return encode


def _wire_class(tp: Any) -> type | None:
    """The class of a type hint (a class, or a generic alias of one) that is written as another value (its
    ``__to_wire__``), else None."""
    owner = get_origin(tp) or tp
    return owner if isinstance(owner, type) and hasattr(owner, "__from_wire__") else None


def _wire_encoder(cls: type) -> Encoder:
    to_wire = cls.__to_wire__  # type: ignore[attr-defined]
    lines = ["def _c_wire(_c_value):", "    _c_x = _c_to_wire(_c_value)", f"    return {_ENCODE.format(v='_c_x')}"]
    return _compile("_c_wire", lines, {**_encoding_namespace(), "_c_to_wire": to_wire}, f"to_json {cls.__qualname__}")


def _encoding_namespace() -> dict[str, Any]:
    return {"_c_plain": _PLAIN, "_c_get": _encoders.get, "_c_new": _encoder}


@functools.cache
def _sequence_encoder() -> Encoder:
    item = _ENCODE.format(v="_c_x")
    lines = ["def _c_sequence(_c_value):", f"    return [{item} for _c_x in _c_value]"]
    return _compile("_c_sequence", lines, _encoding_namespace())


@functools.cache
def _mapping_encoder() -> Encoder:
    # a loop, not a comprehension: most mappings here are small (entries_by_magic, output_stats), and a
    # comprehension is a function call of its own
    lines = [
        "def _c_mapping(_c_value):",
        "    _c_out = {}",
        "    for _c_k, _c_x in _c_value.items():",
        f"        _c_out[_c_k if type(_c_k) is str else str(_c_k)] = {_ENCODE.format(v='_c_x')}",
        "    return _c_out",
    ]
    return _compile("_c_mapping", lines, _encoding_namespace())


def json_key(f: dataclasses.Field[Any]) -> str:
    """The key a field is written under: its name, or the ``json_key`` of its metadata (a record that mirrors a
    format of someone else's, such as kafka-log-dirs' camelCase, keeps snake_case names in Python)."""
    key: str = f.metadata.get("json_key", f.name)
    return key


def _record_encoder(cls: type) -> Encoder:
    fields = tuple(f.name for f in dataclasses.fields(cls))
    keys = {f.name: json_key(f) for f in dataclasses.fields(cls)}
    omitted = {f.name for f in dataclasses.fields(cls) if f.metadata.get("omit_if_none")}
    if not _attribute_names(fields):

        def record(value: Any) -> Any:
            out = {keys[name]: to_json(getattr(value, name)) for name in fields}
            for name in omitted:
                if out[keys[name]] is None:
                    del out[keys[name]]
            return out

        return record
    # the keys in field order, an omitted one left out where it stands (what deleting it afterwards leaves): one dict
    # display up to the first field that may be omitted, then one key at a time
    lines = ["def _c_record(_c_value):"]
    lines += [f"    _c_f{i} = _c_value.{name}" for i, name in enumerate(fields)]
    lines += [f"    _c_f{i} = {_ENCODE.format(v=f'_c_f{i}')}" for i in range(len(fields))]
    lead = next((i for i, name in enumerate(fields) if name in omitted), len(fields))
    lines.append(f"    _c_out = {{{', '.join(f'{keys[name]!r}: _c_f{i}' for i, name in enumerate(fields[:lead]))}}}")
    for i, name in enumerate(fields[lead:], lead):
        if name in omitted:
            lines.append(f"    if _c_f{i} is not None:")
            lines.append(f"        _c_out[{keys[name]!r}] = _c_f{i}")
        else:
            lines.append(f"    _c_out[{keys[name]!r}] = _c_f{i}")
    lines.append("    return _c_out")
    return _compile("_c_record", lines, _encoding_namespace(), f"to_json {cls.__qualname__}")


# --- decoding -------------------------------------------------------------------------------------------------------


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # evaluating string annotations compiles them: once per class, not once per record decoded
    return get_type_hints(cls, vars(sys.modules[cls.__module__]))


def from_json(cls: type[T], data: Any, where: str = "") -> T:
    """Build ``cls`` from JSON data, checking every key and type; a ModelError names the offending path."""
    return _decoder(cls)(data, where or cls.__name__)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


# A value's path is built only when an error names it: (parent path, key) pairs down from the root's name.
Where = Any


def _where(path: Where) -> str:
    keys = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    return path + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in reversed(keys))


Decoder = Callable[[Any, Where], Any]


def _wrong(where: Where, what: str, data: Any) -> ModelError:
    return ModelError(f"{_where(where)}: expected {what}, found {data!r}")


def _not_a(where: Where, what: str, data: Any) -> ModelError:
    return ModelError(f"{_where(where)}: expected {what}, found {type(data).__name__}")


def _unknown_key(where: Where, data: Any, names: frozenset[str]) -> ModelError:
    unknown = sorted(set(data) - names)[0]
    return ModelError(f"{_where(where)}: unknown key {unknown!r} (known: {', '.join(sorted(names))})")


def _missing_key(where: Where, name: str) -> ModelError:
    return ModelError(f"{_where(where)}: missing key {name!r}")


def _refused(where: Where, exc: Exception) -> ModelError:
    return ModelError(f"{_where(where)}: {exc}")


def _int_key(key: Any, where: Where) -> int:
    """A mapping's int key from its JSON spelling: decimal digits exactly as ``str(int)`` writes them."""
    if type(key) is int:
        return key
    if isinstance(key, str):
        try:
            number = int(key)
        except ValueError:
            pass
        else:
            if str(number) == key:
                return number
    raise _wrong(where, "an integer key", key)


# the checks of the JSON scalars, as source: ``{v}`` holds the value, ``{w}`` builds its path
_SCALAR_CHECKS = {
    bool: ["if type({v}) is not bool:", "    raise _c_wrong({w}, 'true or false', {v})"],
    int: [
        "if type({v}) is not int and (not isinstance({v}, int) or isinstance({v}, bool)):",
        "    raise _c_wrong({w}, 'an integer', {v})",
    ],
    str: ["if type({v}) is not str and not isinstance({v}, str):", "    raise _c_wrong({w}, 'a string', {v})"],
    float: [
        "if type({v}) is not float:",
        "    if not isinstance({v}, (int, float)) or isinstance({v}, bool):",
        "        raise _c_wrong({w}, 'a number', {v})",
        "    {v} = float({v})",
    ],
}


class _Source:
    """A generated decoder's source and the names it refers to."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {
            "ModelError": ModelError,
            "_c_where": _where,
            "_c_wrong": _wrong,
            "_c_not_a": _not_a,
            "_c_unknown_key": _unknown_key,
            "_c_missing_key": _missing_key,
            "_c_refused": _refused,
            "_c_int_key": _int_key,
            "_c_enum_member": enum_member,
        }
        self.locals = 0

    def name(self, value: Any) -> str:
        """A name in the namespace that holds ``value``."""
        name = f"_c_{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def local(self) -> str:
        self.locals += 1
        return f"_c_l{self.locals}"

    def value(self, tp: Any, v: str, w: str) -> list[str]:
        """Lines that check the JSON value in local ``v`` as a ``tp`` and leave the decoded value in it; ``w`` is an
        expression of the value's path, evaluated only for an error or a nested record's decoder. Containers are
        decoded in place, records and unions by their own decoders."""
        if tp is Any:
            return []
        if (wire := _wire_class(tp)) is not None:
            build, failed = self.name(wire.__from_wire__), self.local()  # type: ignore[attr-defined]
            return [
                *self.value(wire.__wire_type__(*get_args(tp)), v, w),  # type: ignore[attr-defined]
                "try:",
                f"    {v} = {build}({v})",
                f"except (TypeError, ValueError) as {failed}:",
                f"    raise _c_refused({w}, {failed}) from {failed}",
            ]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return [f"{v} = {self.name(_decoder(tp))}({v}, {w})"]
        if tp in _SCALAR_CHECKS:
            return [line.format(v=v, w=w) for line in _SCALAR_CHECKS[tp]]
        if _is_union(tp):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) == 1 and len(args) < len(get_args(tp)):
                # X | None: a union with one option says what that option says
                inner = self.value(args[0], v, w)
                return [f"if {v} is not None:", *_indent(inner)] if inner else []
            return [f"{v} = {self.name(_decoder(tp))}({v}, {w})"]
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            members = self.name(tp._value2member_map_)  # what Enum.__new__ looks in first
            kind = self.name(tp)
            return [
                "try:",
                f"    {v} = {members}[{v}]",
                "except (KeyError, TypeError):",
                f"    {v} = _c_enum_member({kind}, {v}, _c_where({w}))",
            ]
        origin = get_origin(tp)
        if origin is tuple or origin is Sequence:  # a Sequence field is decoded as a tuple
            (item,) = [a for a in get_args(tp) if a is not Ellipsis]
            out, i, x = self.local(), self.local(), self.local()
            return [
                f"if type({v}) is not list and not isinstance({v}, list):",
                f"    raise _c_not_a({w}, 'a list', {v})",
                f"{out} = []",
                f"for {i}, {x} in enumerate({v}):",
                *_indent(self.value(item, x, f"({w}, {i})")),
                f"    {out}.append({x})",
                f"{v} = tuple({out})",
            ]
        if origin is dict:
            out, k, x, key = self.local(), self.local(), self.local(), self.local()
            # JSON's keys are strings: an int key (a magic, say) is written as its decimal digits and read back so
            key_line = (
                f"    {key} = _c_int_key({k}, ({w}, {k}))"
                if get_args(tp)[0] is int
                else f"    {key} = {k} if type({k}) is str else str({k})"
            )
            return [
                f"if type({v}) is not dict and not isinstance({v}, dict):",
                f"    raise _c_not_a({w}, 'an object', {v})",
                f"{out} = {{}}",
                f"for {k}, {x} in {v}.items():",
                key_line,
                *_indent(self.value(get_args(tp)[1], x, f"({w}, {k})")),
                f"    {out}[{key}] = {x}",
                f"{v} = {out}",
            ]
        raise ModelError(f"the model has no decoder for {tp}")

    def compile(self, name: str, lines: list[str], tp: Any) -> Decoder:
        return _compile(name, lines, self.namespace, f"from_json {getattr(tp, '__qualname__', tp)}")


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def _make_decoder(tp: Any) -> Decoder:
    """The decoder of one type; _decoder builds it once: records are decoded by the thousand (plans, state rows)."""
    if _is_union(tp):
        args = [a for a in get_args(tp) if a is not type(None)]
        nullable = len(args) < len(get_args(tp))
        options = [_decoder(a) for a in args]

        def union(data: Any, where: Where) -> Any:
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
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and _wire_class(tp) is None:
        return _record_decoder(tp)
    if tp is Any:
        return lambda data, where: data
    source = _Source()
    lines = ["def _c_decode(data, where):", *_indent(source.value(tp, "data", "where")), "    return data"]
    return source.compile("_c_decode", lines, tp)


# functools.cache's wrapper is typed as taking any Hashable; a type hint (a class, a union, a generic alias) is one
_decoder: Callable[[Any], Decoder] = functools.cache(_make_decoder)


def _init_defaults(cls: type[object], names: list[str]) -> list[Any] | None:
    """What ``cls.__init__`` puts in for each field when it is not passed (``inspect.Parameter.empty`` for a required
    one, a factory's mark for a default factory), when ``cls(*values)`` with those filled in is the same call as
    ``cls(**kwargs)``: a class called through ``type.__call__`` and ``object.__new__`` whose ``__init__`` takes
    exactly the fields, in order, as plain parameters (as @dataclass writes it); else None."""
    if type(cls).__call__ is not type.__call__ or cls.__new__ is not object.__new__:
        return None
    try:
        params = list(inspect.signature(cls.__init__, follow_wrapped=False).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    if [p.name for p in params] != names or any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params):
        return None  # an InitVar, a field left out of __init__, keyword-only fields, *args or **kwargs
    return [p.default for p in params]


def _record_decoder(tp: type) -> Decoder:
    fields = dataclasses.fields(tp)
    hints = _hints(tp)
    source = _Source()
    keys = [json_key(f) for f in fields]
    known = source.name(frozenset(keys))
    absent = source.name(object())  # what data.get gives for a key data lacks
    # A record is built by calling its class, as ever (its __init__ and __post_init__ run; its instances keep their
    # compact layout): with every field's value in order, those it lacks being what __init__ would put in.
    required = [f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in fields]
    defaults = _init_defaults(tp, [f.name for f in fields])
    if defaults is not None and any(d is inspect.Parameter.empty and not r for d, r in zip(defaults, required)):
        defaults = None  # an __init__ of its own that requires a field with a default: let it say so, as ever
    lines = [
        "def _c_record(data, where):",
        "    if type(data) is not dict and not isinstance(data, dict):",
        "        raise _c_not_a(where, 'an object', data)",
        *(f"    _c_v{i} = data.get({key!r}, {absent})" for i, key in enumerate(keys)),
        # every key is a field's when the fields found are all the keys: no set built per record
        f"    if len(data) != {' + '.join(f'(_c_v{i} is not {absent})' for i in range(len(fields))) or 0}:",
        f"        raise _c_unknown_key(where, data, {known})",
    ]
    if defaults is None:
        lines.append("    kwargs = {}")
    for i, f in enumerate(fields):
        v = f"_c_v{i}"
        checks = source.value(hints[f.name], v, f"(where, {keys[i]!r})")
        if required[i]:
            lines += [f"    if {v} is {absent}:", f"        raise _c_missing_key(where, {keys[i]!r})", *_indent(checks)]
            if defaults is None:
                lines.append(f"    kwargs[{f.name!r}] = {v}")
        elif defaults is not None:
            lines += [f"    if {v} is {absent}:", f"        {v} = {source.name(defaults[i])}"]
            if checks:
                lines += ["    else:", *_indent(_indent(checks))]
        else:
            lines += [f"    if {v} is not {absent}:", *_indent(_indent(checks)), f"        kwargs[{f.name!r}] = {v}"]
    call = ", ".join(f"_c_v{i}" for i in range(len(fields))) if defaults is not None else "**kwargs"
    lines += [
        "    try:",
        f"        return {source.name(tp)}({call})",
        "    except ModelError:",
        "        raise",
        "    except (TypeError, ValueError) as exc:",
        "        raise _c_refused(where, exc) from exc",
    ]
    return source.compile("_c_record", lines, tp)


def json_schema(cls: type, title: str = "", description: str = "") -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of a model record, generated from the same type hints the codec checks."""
    defs: dict[str, Any] = {}
    root = _schema(cls, defs)
    out: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    if title:
        out["title"] = title
    if description:
        out["description"] = description
    out.update(defs.pop(cls.__name__))
    out["$defs"] = dict(sorted(defs.items()))
    del root
    return out


def _schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if (wire := _wire_class(tp)) is not None:
        return _schema(wire.__wire_type__(*get_args(tp)), defs)  # type: ignore[attr-defined]
    if _is_union(tp):
        return {"anyOf": [_schema(a, defs) for a in get_args(tp)]}
    if tp is type(None):
        return {"type": "null"}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # recursion guard
            hints = _hints(tp)
            fields_ = dataclasses.fields(tp)
            defs[name] = {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    json_key(f)
                    for f in fields_
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                ],
                "properties": {json_key(f): _schema(hints[f.name], defs) for f in fields_},
            }
            doc = (tp.__doc__ or "").strip()
            if doc and not doc.startswith(f"{name}("):
                defs[name]["description"] = " ".join(doc.split())
        return {"$ref": f"#/$defs/{name}"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    origin = get_origin(tp)
    if origin is tuple or origin is Sequence:
        (item,) = [a for a in get_args(tp) if a is not Ellipsis]
        return {"type": "array", "items": _schema(item, defs)}
    if origin is dict:
        out = {"type": "object", "additionalProperties": _schema(get_args(tp)[1], defs)}
        if get_args(tp)[0] is int:
            out["propertyNames"] = {"pattern": "^(0|-?[1-9][0-9]*)$"}
        return out
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if tp in simple:
        return {"type": simple[tp]}
    if tp is Any:
        return {}
    raise ModelError(f"no schema for {tp}")


# --- JSON text ------------------------------------------------------------------------------------------------------
# The state database holds each segment's result as JSON text, about 1.3 KB: convert writes 10^6 of them on a big
# broker and the swap reads them all back. The standard library's C encoder and decoder take about 12 and 8 us for
# one, orjson 1.5 and 2.6; a text either writes parses back to the same value, and a reader never needs to know which
# wrote it.


def dumps_compact(data: Any) -> str:
    """``json.dumps(data, separators=(",", ":"))`` up to the spelling of non-ASCII characters (orjson writes them as
    themselves, the standard library escapes them) and of floats (``1e-05`` is ``0.00001``). What orjson refuses (a
    string with a lone surrogate, as a path that is not UTF-8 decodes to; an int beyond 64 bits; a key that is not a
    string) goes through the standard library. The records written so hold no NaN (orjson would write null)."""
    try:
        return orjson.dumps(data).decode()
    except TypeError:
        return json.dumps(data, separators=(",", ":"))


def loads_text(text: str | bytes) -> Any:
    """``json.loads(text)``: orjson where it reads the text, the standard library where it does not (NaN and
    Infinity, a lone surrogate, malformed text: its error is the one raised)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
