"""Engines decide where and when the stage functions run; they know nothing about Kafka.

An engine takes a stage name and a list of calls (function arguments plus the host that owns the data) and returns,
in the same order, each call's result or its error. ``serial`` runs them in this process; ``dask`` on a Dask
cluster (a LocalCluster by default); ``spark`` through PySpark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class StageCall:
    args: tuple[Any, ...]
    host: str | None = None  # the worker host that owns the data; None: any worker


@dataclass
class Outcome:
    ok: bool
    value: Any = None
    error: str = ""
    error_type: str = ""


class Engine(Protocol):
    name: str

    def map(self, stage: str, fn: Callable[..., Any], calls: list[StageCall]) -> list[Outcome]: ...

    def close(self) -> None: ...


class SerialEngine:
    """Every call in this process, one after the other: for tiny jobs, debugging and crash tests."""

    name = "serial"

    def map(self, stage: str, fn: Callable[..., Any], calls: list[StageCall]) -> list[Outcome]:
        out = []
        for call in calls:
            try:
                out.append(Outcome(True, fn(*call.args)))
            except Exception as exc:  # reported per call, like the distributed engines do
                out.append(Outcome(False, error=str(exc), error_type=type(exc).__name__))
        return out

    def close(self) -> None:
        pass
