"""The verbs over a cluster manifest: one task per broker, pinned to its host, that reads the broker's part there and
runs the verb over it in the worker's process; the client gets a ``PartOutcome`` per broker, never segments.

The part is checked before anything runs: its bytes against the manifest's sha256 and its content against its own
plan id (an edited or replaced part is refused, naming the broker and the file). One broker's failure is its own
outcome: the others run on.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from migrate import pipeline
from migrate.engines import Engine, SerialEngine, StageCall
from migrate.errors import MigrateError
from migrate.model.cluster_manifest import MAX_PROBLEMS_SHOWN, BrokerPart, ClusterManifest, PartOutcome, Verb
from migrate.model.plan_tree import Plan
from migrate.model.run_state import PartitionState, Stage
from migrate.planning.plan import load_plan


def load_part(part: BrokerPart) -> Plan:
    """The broker's part, as the manifest describes it, or a MigrateError naming the broker and the file."""
    where = f"broker {part.broker_id}: its part {part.path}"
    try:
        data = Path(part.path).read_bytes()
    except OSError as exc:
        raise MigrateError(f"{where} cannot be read ({exc.strerror}); re-plan the cluster with --manifest") from exc
    if hashlib.sha256(data).hexdigest() != part.sha256:
        raise MigrateError(f"{where} is not the file the manifest names (its sha256 differs): re-plan with --manifest")
    plan = load_plan(part.path)
    if plan.plan_id != part.plan_id:
        raise MigrateError(f"{where} holds plan {plan.plan_id}, the manifest names {part.plan_id}: re-plan")
    return plan


def _problems(lines: list[str]) -> tuple[int, tuple[str, ...]]:
    return len(lines), tuple(lines[:MAX_PROBLEMS_SHOWN])


def run_part(verb: Verb, part: BrokerPart, force: bool = False, engine: Engine | None = None) -> PartOutcome:
    """Run on the broker's worker: ``verb`` over the broker's part (``engine``: in this process by default)."""
    started = time.perf_counter()
    try:
        plan = load_part(part)
    except MigrateError as exc:
        return PartOutcome(part.broker_id, verb, False, 0, 0, 0, 0.0, 1, (str(exc),), error=str(exc))
    engine = engine or SerialEngine()
    est = plan.estimates
    path = part.path
    if verb == Verb.EXECUTE:
        report = pipeline.execute(plan, engine)
        lines = [f"{e.log_dir}: {e.message}" for e in report.errors] + [
            f"{o.partition}/{o.base_offset}: {o.problem.message if o.problem else o.outcome}" for o in report.problems
        ]
        done = sum(1 for d in report.log_dirs for p in d.partitions if p.state == PartitionState.MIGRATED)
        ok = report.ok
    elif verb == Verb.STATUS:
        status = pipeline.status(plan, engine, path)
        lines = [f"{e.log_dir}: {e.message}" for e in status.errors]
        done = sum(1 for d in status.log_dirs for p in d.partitions if p.state == PartitionState.MIGRATED)
        ok = not status.errors
    elif verb == Verb.VERIFY:
        checked = pipeline.verify_live(plan, engine, path)
        lines = [f"{e.log_dir}: {e.message}" for e in checked.errors] + [
            f"{c.log_dir}: {x}" for c in checked.log_dirs for x in c.problems
        ]
        done = est.partitions - sum(len(c.unmigrated) for c in checked.log_dirs)
        ok = checked.ok
    else:
        leave = (
            pipeline.rollback(plan, engine, path, force=force)
            if verb == Verb.ROLLBACK
            else pipeline.finalize(plan, engine, path)
        )
        lines = [f"{e.log_dir}: {e.message}" for e in leave.errors] + list(leave.refused)
        done = sum(len(r.restored) for r in leave.rollbacks) + sum(len(f.finalized) for f in leave.finalizes)
        ok = leave.ok
    count, first = _problems(lines)
    seconds = round(time.perf_counter() - started, 3)
    return PartOutcome(part.broker_id, verb, ok, est.partitions, done, est.segments, seconds, count, first)


def run_manifest(
    manifest: ClusterManifest,
    engine: Engine,
    verb: Verb,
    brokers: tuple[int, ...] = (),
    force: bool = False,
    on_outcome: Callable[[PartOutcome], None] | None = None,
) -> list[PartOutcome]:
    """``verb`` on every broker of the manifest (or of ``brokers``), each on its own worker, at once."""
    parts = [manifest.part(b) for b in brokers] if brokers else list(manifest.brokers)
    calls = [StageCall((verb, p, force), host=p.host, log_dir=f"broker-{p.broker_id}") for p in parts]
    results = engine.map(Stage.PART, run_part, calls)
    out = []
    for part, r in zip(parts, results, strict=True):
        outcome = (
            r.value
            if r.ok
            else PartOutcome(
                part.broker_id, verb, False, 0, 0, 0, 0.0, 1, (r.error,), error=f"the task failed: {r.error}"
            )
        )
        out.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return out
