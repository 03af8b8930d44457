"""The strict JSON codec of the project's records, and the JSON schema generator beside it.

``to_json`` turns a frozen dataclass (enums by value, tuples as lists) into plain JSON data; ``from_json`` builds one
back, rejecting unknown keys, missing fields and wrong types with the path of the offending value (a ModelError), so
a plan, a state row or an event that crossed a process boundary is either the record it claims to be or refused.
``json_schema`` describes the same records for operators' tools (``plans/plan.schema.json``). Nothing here knows
the plan: ``migrate.model`` is the vocabulary, this is how it is written down.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from migrate.errors import ModelError

T = TypeVar("T")


def enum_member(kind: type[enum.Enum], value: Any, where: str) -> Any:
    """``kind(value)``, or a ModelError that names where the value stood and lists the allowed ones."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise ModelError(f"{where}: {value!r} is not one of {allowed}") from None


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _omitted_if_none(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("omit_if_none"))


def to_json(value: Any) -> Any:
    """A model record as plain JSON data (enums by value, tuples as lists, dataclasses as objects)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value.value if isinstance(value, enum.Enum) else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {name: to_json(getattr(value, name)) for name in _field_names(type(value))}
        for name in _omitted_if_none(type(value)):
            if out[name] is None:
                del out[name]
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):  # tuples, lists, lazy rows
        return [to_json(v) for v in value]
    return value


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


@functools.cache
def _decoder(tp: Any) -> Decoder:
    """The decoder of one type, built once: records are decoded by the thousand (plans, state rows)."""
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
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        spec = [
            (
                f.name,
                _decoder(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(tp)
        ]
        names = frozenset(name for name, _, _ in spec)

        def record(data: Any, where: Where) -> Any:
            if not isinstance(data, dict):
                raise ModelError(f"{_where(where)}: expected an object, found {type(data).__name__}")
            if not names.issuperset(data):
                unknown = sorted(set(data) - names)[0]
                raise ModelError(f"{_where(where)}: unknown key {unknown!r} (known: {', '.join(sorted(names))})")
            kwargs = {}
            for name, decode, required in spec:
                if name in data:
                    kwargs[name] = decode(data[name], (where, name))
                elif required:
                    raise ModelError(f"{_where(where)}: missing key {name!r}")
            try:
                return tp(**kwargs)
            except ModelError:
                raise
            except (TypeError, ValueError) as exc:
                raise ModelError(f"{_where(where)}: {exc}") from exc

        return record
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return lambda data, where: enum_member(tp, data, _where(where))
    origin = get_origin(tp)
    if origin is tuple:
        (item,) = [a for a in get_args(tp) if a is not Ellipsis]
        decode_item = _decoder(item)

        def sequence(data: Any, where: Where) -> Any:
            if not isinstance(data, list):
                raise ModelError(f"{_where(where)}: expected a list, found {type(data).__name__}")
            return tuple(decode_item(v, (where, i)) for i, v in enumerate(data))

        return sequence
    if origin is dict:
        decode_value = _decoder(get_args(tp)[1])

        def mapping(data: Any, where: Where) -> Any:
            if not isinstance(data, dict):
                raise ModelError(f"{_where(where)}: expected an object, found {type(data).__name__}")
            return {str(k): decode_value(v, (where, k)) for k, v in data.items()}

        return mapping
    if tp is Any:
        return lambda data, where: data
    if tp is bool:
        return _scalar(lambda d: isinstance(d, bool), "true or false")
    if tp is int:
        return _scalar(lambda d: isinstance(d, int) and not isinstance(d, bool), "an integer")
    if tp is float:

        def number(data: Any, where: Where) -> float:
            if not isinstance(data, (int, float)) or isinstance(data, bool):
                raise ModelError(f"{_where(where)}: expected a number, found {data!r}")
            return float(data)

        return number
    if tp is str:
        return _scalar(lambda d: isinstance(d, str), "a string")
    raise ModelError(f"the model has no decoder for {tp}")


def _scalar(check: Callable[[Any], bool], what: str) -> Decoder:
    def scalar(data: Any, where: Where) -> Any:
        if not check(data):
            raise ModelError(f"{_where(where)}: expected {what}, found {data!r}")
        return data

    return scalar


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
    if _is_union(tp):
        return {"anyOf": [_schema(a, defs) for a in get_args(tp)]}
    if tp is type(None):
        return {"type": "null"}
    if dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # recursion guard
            hints = _hints(tp)
            fields_ = dataclasses.fields(tp)
            defs[name] = {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    f.name
                    for f in fields_
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                ],
                "properties": {f.name: _schema(hints[f.name], defs) for f in fields_},
            }
            doc = (tp.__doc__ or "").strip()
            if doc and not doc.startswith(f"{name}("):
                defs[name]["description"] = " ".join(doc.split())
        return {"$ref": f"#/$defs/{name}"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    origin = get_origin(tp)
    if origin is tuple:
        (item,) = [a for a in get_args(tp) if a is not Ellipsis]
        return {"type": "array", "items": _schema(item, defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(get_args(tp)[1], defs)}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if tp in simple:
        return {"type": simple[tp]}
    if tp is Any:
        return {}
    raise ModelError(f"no schema for {tp}")
