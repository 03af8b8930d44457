"""Engines decide where and when the stage functions run; they know nothing about Kafka.

An engine takes a stage name and a list of calls (function arguments plus the host that owns the data) and returns,
in the same order, each call's result or its error. ``serial`` runs them in this process; ``dask`` on a Dask
cluster (a LocalCluster by default); ``spark`` through PySpark. The plan, when it is a call's first argument, is
sent to the workers once, not with every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from migrate.model import Plan
from migrate.watch import progress


@dataclass(frozen=True)
class StageCall:
    args: tuple[Any, ...]
    host: str | None = None  # the worker host that owns the data; None: any worker

    @property
    def plan(self) -> Plan | None:
        return self.args[0] if self.args and isinstance(self.args[0], Plan) else None


@dataclass(frozen=True)
class CallResult:
    ok: bool
    value: Any = None
    error: str = ""
    error_type: str = ""


class Engine(Protocol):
    name: str

    def map(self, stage: str, fn: Callable[..., Any], calls: list[StageCall]) -> list[CallResult]: ...

    def close(self) -> None: ...


class SerialEngine:
    """Every call in this process, one after the other: for tiny jobs, debugging and crash tests."""

    name = "serial"

    def __init__(self, on_segment: Callable[[progress.Event], None] | None = None) -> None:
        self.on_segment = on_segment

    def map(self, stage: str, fn: Callable[..., Any], calls: list[StageCall]) -> list[CallResult]:
        out = []
        previous = progress.set_sink(self.on_segment)
        try:
            for call in calls:
                try:
                    out.append(CallResult(True, fn(*call.args)))
                except Exception as exc:  # reported per call, like the distributed engines do
                    out.append(CallResult(False, error=str(exc), error_type=type(exc).__name__))
        finally:
            progress.set_sink(previous)
        return out

    def close(self) -> None:
        pass
