"""The migration as an operator runs it: execute (prepare, convert, verify, swap), rollback, finalize, status.

Stages run on an engine; each stage finishes everywhere before the next starts, so nothing live changes before
every partition of a log dir has been converted and verified. Journals that leave a log dir (rollback, finalize) are
archived beside the plan file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from migrate import stages
from migrate.engines import Engine, Outcome, StageCall


def _calls_per_log_dir(plan: dict[str, Any], *extra: Any) -> list[StageCall]:
    return [StageCall((plan, d["log_dir"], *extra), d.get("host")) for d in plan["log_dirs"]]


def _errors(stage: str, calls: list[StageCall], outcomes: list[Outcome]) -> list[dict[str, Any]]:
    return [
        {
            "stage": stage,
            "args": [a for a in c.args[1:] if not isinstance(a, dict)],
            "error": o.error,
            "type": o.error_type,
        }
        for c, o in zip(calls, outcomes)
        if not o.ok
    ]


def execute(plan: dict[str, Any], engine: Engine) -> dict[str, Any]:
    host_of = {d["log_dir"]: d.get("host") for d in plan["log_dirs"]}
    report: dict[str, Any] = {"plan_id": plan["plan_id"], "engine": engine.name, "errors": [], "stage_seconds": {}}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        report["stage_seconds"][stage] = round(now - clock, 3)
        clock = now

    calls = _calls_per_log_dir(plan)
    outcomes = engine.map("prepare", stages.prepare_log_dir, calls)
    lap("prepare")
    report["errors"] += _errors("prepare", calls, outcomes)
    ready = {c.args[1] for c, o in zip(calls, outcomes) if o.ok}

    calls = [StageCall((plan, t), host_of[t["log_dir"]]) for t in plan["tasks"] if t["log_dir"] in ready]
    outcomes = engine.map("convert", stages.convert_group, calls)
    lap("convert")
    report["errors"] += _errors("convert", calls, outcomes)
    segments = [r for o in outcomes if o.ok for r in o.value]
    report["converted"] = sum(1 for r in segments if r["skipped"] is None)
    report["resumed_segments"] = sum(1 for r in segments if r["skipped"])
    report["bytes_in"] = sum(r["result"]["source_bytes"] for r in segments if r["result"])
    report["bytes_out"] = sum(r["result"]["output_bytes"] for r in segments if r["result"])
    report["records"] = sum(r["result"]["records"] for r in segments if r["result"])
    report["conversion_seconds"] = round(sum(r["result"]["seconds"] for r in segments if r["skipped"] is None), 3)

    calls = [
        StageCall((plan, d["log_dir"], p["partition"]), d.get("host"))
        for d in plan["log_dirs"]
        if d["log_dir"] in ready
        for p in d["partitions"]
    ]
    outcomes = engine.map("verify", stages.verify_partition, calls)
    lap("verify")
    report["errors"] += _errors("verify", calls, outcomes)
    report["verify"] = [o.value for o in outcomes if o.ok]

    calls = [c for c in _calls_per_log_dir(plan) if c.args[1] in ready]
    outcomes = engine.map("swap", stages.swap_log_dir, calls)
    lap("swap")
    report["errors"] += _errors("swap", calls, outcomes)
    report["swap"] = [o.value for o in outcomes if o.ok]
    failed = [p for s in report["swap"] for p in s["failed"]]
    report["ok"] = not report["errors"] and not failed
    report["failed_partitions"] = failed
    return report


def _archive(plan_path: str | Path | None, results: list[dict[str, Any]], what: str) -> list[str]:
    archived = []
    if plan_path is None:
        return archived
    folder = Path(f"{plan_path}.journals")
    for r in results:
        if r.get("journal"):
            folder.mkdir(exist_ok=True)
            name = r["log_dir"].strip("/").replace("/", "_") + f".{what}.jsonl"
            (folder / name).write_text(r["journal"])
            archived.append(str(folder / name))
    return archived


def _leave_log_dirs(
    plan: dict[str, Any], engine: Engine, stage: str, fn: Any, plan_path: str | Path | None, *extra: Any
) -> dict[str, Any]:
    """Rollback or finalize every log dir; their journals leave the log dir and are archived beside the plan."""
    calls = _calls_per_log_dir(plan, *extra)
    outcomes = engine.map(stage, fn, calls)
    results = [o.value for o in outcomes if o.ok]
    return {
        "ok": all(o.ok for o in outcomes),
        "log_dirs": [{k: v for k, v in r.items() if k != "journal"} for r in results],
        "errors": _errors(stage, calls, outcomes),
        "journals": _archive(plan_path, results, stage),
    }


def rollback(
    plan: dict[str, Any], engine: Engine, plan_path: str | Path | None = None, force: bool = False
) -> dict[str, Any]:
    return _leave_log_dirs(plan, engine, "rollback", stages.rollback_log_dir, plan_path, force)


def finalize(plan: dict[str, Any], engine: Engine, plan_path: str | Path | None = None) -> dict[str, Any]:
    return _leave_log_dirs(plan, engine, "finalize", stages.finalize_log_dir, plan_path)


def status(plan: dict[str, Any], engine: Engine) -> dict[str, Any]:
    calls = _calls_per_log_dir(plan)
    outcomes = engine.map("status", stages.status_log_dir, calls)
    return {"log_dirs": [o.value for o in outcomes if o.ok], "errors": _errors("status", calls, outcomes)}


def verify_live(plan: dict[str, Any], engine: Engine) -> dict[str, Any]:
    calls = _calls_per_log_dir(plan)
    outcomes = engine.map("verify", stages.verify_live_log_dir, calls)
    results = [o.value for o in outcomes if o.ok]
    errors = _errors("verify", calls, outcomes)
    return {"ok": not errors and all(r["ok"] for r in results), "log_dirs": results, "errors": errors}
