"""Copies and builds of frozen records on the hot paths, without a dataclass's per-field work.

``dataclasses.replace`` calls the class's ``__init__`` with every field, each one set through
``object.__setattr__`` on a frozen class: about 6 us for a SegmentOutcome and 10 for a SegmentResult, where filling
the instance's ``__dict__`` at once takes under 2. A run passes a million segments' outcomes and results through such
copies (the convert task's result, each segment's progress event, a pre-stage cut-over), so those sites use these.
They give the record ``dataclasses.replace`` (or the class's call) would, for a class whose ``__init__`` only sets
fields: no ``__post_init__``, no ``InitVar``, no field left out of ``__init__``, no ``__slots__`` (checked once
per class). Nothing is checked of the values: they are a record's own fields, already checked when it was made.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from migrate.errors import ModelError

R = TypeVar("R")

_PLAIN: set[type] = set()  # the classes found fit


def _check(cls: type) -> None:
    fit = (
        dataclasses.is_dataclass(cls)
        and not hasattr(cls, "__post_init__")
        and not hasattr(cls, "__slots__")
        and all(f.init for f in dataclasses.fields(cls))
        and not any(isinstance(v, dataclasses.InitVar) for v in getattr(cls, "__annotations__", {}).values())
    )
    if not fit:
        raise ModelError(f"{cls.__qualname__} is not a plain record: copy it with dataclasses.replace")
    _PLAIN.add(cls)


def fast_replace(record: R, /, **changes: Any) -> R:
    """``dataclasses.replace(record, **changes)`` for a plain record (see the module), at a fifth of the cost."""
    cls = type(record)
    if cls not in _PLAIN:
        _check(cls)
    copy: R = object.__new__(cls)
    copy.__dict__.update(record.__dict__, **changes)
    return copy


def fast_new(cls: type[R], /, **fields: Any) -> R:
    """``cls(**fields)`` for a plain record given every field (see the module), without ``__init__``."""
    if cls not in _PLAIN:
        _check(cls)
    record: R = object.__new__(cls)
    record.__dict__.update(fields)
    return record
