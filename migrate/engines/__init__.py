"""Engines decide where and when the stage functions run; they know nothing about Kafka.

An engine takes a stage (``migrate.model.Stage``) and a list of calls (``StageCall``: the function's arguments, the
plan, the host that owns the data) and returns, in the same order, each call's result or its error. ``serial`` runs
them in this process; ``dask`` on a Dask cluster (a LocalCluster by default); ``spark`` through PySpark. The plan
travels apart from the arguments, so an engine sends it to the workers once, not with every call.

A ``Fold`` given to ``map`` takes each call's result as it arrives and returns what the engine keeps in its place:
a stage whose results hold a record per segment (convert, join) is added up as it goes, and the list ``map``
returns holds only what is left of each call (its errors, a range's part), not a million outcomes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from migrate.model.plan_tree import Plan
from migrate.model.run_state import Stage
from migrate.watch import progress


@dataclass(frozen=True)
class StageCall:
    """One call of a stage function: ``fn(plan, *args)``, or ``fn(*args)`` for a call without a plan, on ``host``.

    ``log_dir`` (the log dir's key in the plan) says whose data the call works on: its result and its error are
    attributed by it, never by a position in ``args``. Every call of one ``Engine.map`` carries the same plan, or
    none."""

    args: tuple[Any, ...]
    host: str | None = None  # the worker host that owns the data; None: any worker
    plan: Plan | None = None
    log_dir: str = ""  # "" for a call about no log dir (a broker's survey)

    def arguments(self) -> tuple[Any, ...]:
        """What the stage function is called with, here: the plan first, when the call has one."""
        return self.args if self.plan is None else (self.plan, *self.args)


@dataclass(frozen=True)
class CallResult:
    """A call's return value, or why it could not run (the exception's message and type name)."""

    ok: bool
    value: Any = None
    error: str = ""
    error_type: str = ""


# (the call's position in the map, its result) -> what the engine keeps of it. Called once per call, in whichever
# thread received the result (the Dask engine's driver and feeder threads both do): a fold must be thread-safe.
Fold = Callable[[int, CallResult], CallResult]


class Engine(Protocol):
    name: str
    # every call runs on this host: a file the driver names (the state archived beside the plan) is one the stage
    # function can open where it is, instead of being sent whole
    shares_files: bool

    def map(
        self, stage: Stage, fn: Callable[..., Any], calls: list[StageCall], fold: Fold | None = None
    ) -> list[CallResult]: ...

    def close(self) -> None: ...


class SerialEngine:
    """Every call in this process, one after the other: for tiny jobs, debugging and crash tests."""

    name = "serial"
    shares_files = True

    def __init__(self, on_segment: Callable[[progress.Event], None] | None = None) -> None:
        self.on_segment = on_segment

    def map(
        self, stage: Stage, fn: Callable[..., Any], calls: list[StageCall], fold: Fold | None = None
    ) -> list[CallResult]:
        out = []
        previous = progress.set_sink(self.on_segment)
        try:
            for i, call in enumerate(calls):
                try:
                    r = CallResult(True, fn(*call.arguments()))
                except Exception as exc:  # reported per call, like the distributed engines do
                    r = CallResult(False, error=str(exc), error_type=type(exc).__name__)
                out.append(r if fold is None else fold(i, r))
        finally:
            progress.set_sink(previous)
        return out

    def close(self) -> None:
        pass
