"""Progress of a run, one finished segment at a time, wherever the stage runs.

Stages call ``report(outcome)`` as each segment finishes (and, for a segment converted in ranges, as each range
finishes: a ``RangeProgress``, so that bytes and the ETA move during a large segment); an engine installs the sink
that carries it to the operator (the Dask engine: an event in the scheduler's event log, ``migrate.watch.events``,
which the scheduler's plugin folds into the migration page, status.json and Prometheus metrics; the serial engine:
the driver's progress line).
Without a sink nothing happens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from migrate.model.run_state import RangeProgress, SegmentOutcome

Event = SegmentOutcome | RangeProgress  # a finished segment, or a finished range of one (progress only)
Sink = Callable[[Event], None]
_sink: Sink | None = None


def set_sink(sink: Sink | None) -> Sink | None:
    """Install ``sink`` for this process; returns the previous one."""
    global _sink
    previous, _sink = _sink, sink
    return previous


def report(outcome: Event) -> None:
    if _sink is not None:
        with contextlib.suppress(Exception):  # progress must never fail a conversion
            _sink(outcome)
