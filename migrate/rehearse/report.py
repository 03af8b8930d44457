"""Where a rehearsal keeps its files (the report, its state, its plan, its lock), the state file, and the report built
from the state: its verdict in one line, what to do next, and the projection."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from migrate.codec import from_json, to_json
from migrate.errors import MigrateError
from migrate.rehearse.projection import project
from migrate.rehearse.readers import ORACLE_READER
from migrate.rehearse.records import REHEARSAL_VERSION, RehearsalReport, RehearsalState, StepStatus, now, step_names
from migrate.run.workspace import write_durably
from migrate.units import human_seconds


@dataclass(frozen=True)
class RehearsalPaths:
    report: Path
    state: Path
    plan: Path
    lock: Path

    @classmethod
    def beside(cls, report: str | Path) -> RehearsalPaths:
        report = Path(report).resolve()
        base = str(report.with_suffix("")) if report.suffix == ".json" else str(report)
        return cls(report, Path(base + ".state.json"), Path(base + ".plan.json"), Path(base + ".lock"))


def load_state(path: Path) -> RehearsalState:
    from migrate.errors import ModelError

    try:
        data = json.loads(path.read_text())
        return from_json(RehearsalState, data, "rehearsal state")
    except (OSError, ValueError, ModelError) as exc:
        raise MigrateError(
            f"{path}: cannot read the rehearsal state ({exc}). If the rehearsal's data was rolled back (check with "
            "`kafka-log-migrate status --plan` on its plan file), delete this file and rehearse again."
        ) from exc


def save_state(state: RehearsalState, paths: RehearsalPaths) -> None:
    write_durably(paths.state, json.dumps(to_json(state), separators=(",", ":")) + "\n")


def finished(state: RehearsalState) -> bool:
    """The rehearsal needs nothing more: no step was cut short and the data is back (or was never changed)."""
    if any(s.status in (StepStatus.RUNNING, StepStatus.INTERRUPTED) for s in state.steps):
        return False
    rollback = state.step("rollback")
    if rollback is not None and rollback.status == StepStatus.FAILED:
        return False
    last = step_names(state.config)[-1]
    return state.step(last) is not None


SLOW_READER_FACTOR = 10  # the independent reader took this many times execute's wall time, or more
INDEPENDENT_READER = "kafka-python"  # what --independent-reader names (its verdicts carry its version after it)


def slow_reader_advice(state: RehearsalState) -> str:
    """Where the independent reader (kafka-python, before and after) took far longer than execute: how to leave it
    out next time (Apache Kafka's own reader and this tool's verification still read every record)."""
    execute = state.step("execute")
    seconds = sum(r.seconds for r in state.readers if r.reader.startswith(INDEPENDENT_READER) and r.available)
    if execute is None or execute.seconds <= 0 or seconds < SLOW_READER_FACTOR * execute.seconds:
        return ""
    return (
        f" The independent reader ({INDEPENDENT_READER}) took {human_seconds(seconds)}, "
        f"{seconds / execute.seconds:.0f} times execute's {human_seconds(execute.seconds)}: rehearse with "
        "`--independent-reader none` to leave it out (Apache Kafka's own reader and this tool's verification still "
        "read every record)."
    )


def build_report(state: RehearsalState, paths: RehearsalPaths) -> RehearsalReport:
    names = step_names(state.config)
    ok = all((s := state.step(n)) is not None and s.status == StepStatus.PASSED for n in names)
    bad = next((s for s in state.steps if s.status not in (StepStatus.PASSED, StepStatus.SKIPPED)), None)
    plan_cmd = f"kafka-log-migrate rollback --plan {paths.plan}"
    resume_cmd = f"kafka-log-migrate rehearse --resume -o {paths.report}"
    if ok:
        verdict = "PASSED: every step passed and the rollback left every file byte-identical (mtimes included)"
        next_steps = (
            "Size the maintenance window from the projection, then migrate the cluster broker by broker (`plan`, "
            "`execute`, `verify`, and `finalize` once the brokers run well)."
        )
        if state.copy is not None:
            next_steps += (
                f" The copy in {state.copy.dir} can be deleted (rm -r; its hard links do not touch the canary)."
            )
    elif bad is None:
        missing = next(n for n in names if state.step(n) is None)
        verdict = f"INCOMPLETE: step {missing} has not run yet"
        next_steps = f"Continue with `{resume_cmd}`."
    elif bad.status in (StepStatus.RUNNING, StepStatus.INTERRUPTED):
        how = (
            "was interrupted (Ctrl-C)" if bad.status == StepStatus.INTERRUPTED else "was running when the process ended"
        )
        verdict = f"INCOMPLETE: step {bad.name} {how}"
        next_steps = (
            f"Finish the rehearsal with `{resume_cmd}` (it resumes {bad.name}, then verifies, rolls back and compares "
            f"fingerprints)"
            + (f", or put the originals back now with `{plan_cmd}`." if state.plan is not None else ".")
        )
    else:
        verdict = f"FAILED at step {bad.name}: {bad.message}"
        rollback = state.step("rollback")
        if rollback is not None and rollback.status == StepStatus.FAILED:
            next_steps = (
                f"The data is NOT back as it was. Read the rollback step above; once the cause is fixed run "
                f"`{resume_cmd}` (add --force to put the originals back over changed live files), or `{plan_cmd}`."
            )
        else:
            next_steps = "The data was left as it was found (see fingerprints). Fix the cause above and rehearse again."
    next_steps += slow_reader_advice(state)
    projection = project(state)
    oracle = next((r for r in reversed(state.readers) if r.reader == ORACLE_READER), None)
    return RehearsalReport(
        version=REHEARSAL_VERSION,
        tool=state.tool,
        id=state.id,
        ok=ok,
        verdict=verdict,
        first_failing_step=None if ok or bad is None else bad.name,
        next_steps=next_steps,
        host=state.host,
        started=state.started,
        updated=now(),
        log_dirs=state.config.log_dirs,
        rehearsed_on=state.targets,
        report_path=str(paths.report),
        state_path=str(paths.state),
        plan_path=str(paths.plan),
        plan=state.plan,
        engine=state.engine,
        engine_start_seconds=state.engine_start_seconds,
        steps=state.steps,
        copy=state.copy,
        growth=state.growth,
        execute=state.execute,
        refusals=state.refusals,
        readers=state.readers,
        oracle=(
            f"{oracle.stage}: {'OK' if oracle.ok else 'FAILED' if oracle.ok is False else 'not available'}: "
            f"{oracle.detail}"
            if oracle
            else "not run"
        ),
        rollback=state.rollback,
        fingerprints=state.comparisons,
        projection=projection,
        events=state.events,
        clients_before=state.clients_before,
        clients_after=state.clients_after,
    )


def render_html(report: RehearsalReport, json_path: Path) -> Path:
    """The HTML rehearsal report beside the JSON one (``migrate.reports.report_page``)."""
    from migrate.reports.report_page import render_rehearsal  # its templates: only when a page is asked for

    target = json_path.with_suffix(".html")
    write_durably(target, render_rehearsal(to_json(report)))
    return target


def write_report(state: RehearsalState, paths: RehearsalPaths, html: bool = False) -> RehearsalReport:
    report = build_report(state, paths)
    if html:
        page = render_html(report, paths.report)
        report = dataclasses.replace(report, html_report=str(page))
    write_durably(paths.report, json.dumps(to_json(report), indent=1) + "\n")
    return report
