"""The pipeline's stages as engine-free functions: prepare, convert, verify, swap; and rollback, finalize, status.

Each takes the plan (a dict) and small serializable arguments and returns a small serializable dict, so Dask, Spark
or a plain loop can run it. Each runs on the host that owns the log dir, writes its own journal events, and is
idempotent: running it again after a crash finishes the job instead of redoing or breaking it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from migrate.errors import MigrateError, SourceChangedError
from migrate.journal import Journal, JournalState
from migrate.logdir import LogDirLock
from migrate.segment.convert import convert_segment
from migrate.segment.task import ConvertOptions, SegmentResult, SegmentTask
from migrate.segment.verify import verify_segment
from migrate.swap import lower_fence, raise_fence, remove_work_dir, rollback_partition, swap_partition
from migrate.workspace import SEGMENT_SUFFIXES, foreign_journals, journal_path, segment_file, staging_dir


def _log_dir_entry(plan: dict[str, Any], log_dir: str) -> dict[str, Any]:
    for d in plan["log_dirs"]:
        if d["log_dir"] == log_dir:
            return d
    raise MigrateError(f"log dir {log_dir} is not in plan {plan['plan_id']}")


def _partition_entry(plan: dict[str, Any], log_dir: str, partition: str) -> dict[str, Any]:
    for p in _log_dir_entry(plan, log_dir)["partitions"]:
        if p["partition"] == partition:
            return p
    raise MigrateError(f"partition {partition} of {log_dir} is not in plan {plan['plan_id']}")


def _journal(plan: dict[str, Any], log_dir: str) -> Journal:
    return Journal(journal_path(log_dir, plan["plan_id"]))


def _require_local(log_dir: str) -> None:
    if not Path(log_dir).is_dir():
        import socket

        raise MigrateError(
            f"log dir {log_dir} does not exist on this host ({socket.gethostname()}): the task ran on the wrong "
            "host. Map each log dir to its broker host with --host-map."
        )


def prepare_log_dir(plan: dict[str, Any], log_dir: str) -> dict[str, Any]:
    """Refuse changed inputs, then put the fence up: from here until the swap is done no broker can start."""
    _require_local(log_dir)
    entry = _log_dir_entry(plan, log_dir)
    journal = _journal(plan, log_dir)
    others = foreign_journals(log_dir, plan["plan_id"])
    if others:
        raise MigrateError(
            f"{log_dir}: {others[0].name} belongs to another migration that was not finalized or rolled back"
        )
    state = journal.state()
    if state.log_dir in ("swapped", "finalized", "rolled-back"):
        return {"log_dir": log_dir, "state": state.log_dir, "resumed": True}
    lock_existed = (Path(log_dir) / ".lock").exists() if state.lock_existed is None else state.lock_existed
    with LogDirLock(log_dir, remove_after=not lock_existed):
        changed = []
        for p in entry["partitions"]:
            for s in p["segments"]:
                seg = state.segments.get(JournalState.key(p["partition"], s["base_offset"]), {})
                if seg.get("state") in ("swapping", "swapped"):
                    continue
                live = segment_file(p["dir"], s["base_offset"], ".log")
                st = live.stat() if live.exists() else None
                if st is None or (st.st_size, st.st_mtime_ns) != (s["size"], s["mtime_ns"]):
                    changed.append(str(live))
        if changed:
            raise SourceChangedError(
                f"{len(changed)} segment(s) changed since planning, e.g. {changed[0]}. A broker may have run on "
                f"{log_dir}: make a new plan."
            )
        resumed = state.log_dir != "new"
        if not resumed:
            journal.append("execute-started", plan_id=plan["plan_id"], log_dir=log_dir, lock_existed=lock_existed)
        raise_fence(log_dir, plan["plan_id"], journal)
    return {"log_dir": log_dir, "state": "started", "resumed": resumed}


def task_for(plan: dict[str, Any], log_dir: str, partition: str, base_offset: int) -> SegmentTask:
    p = _partition_entry(plan, log_dir, partition)
    seg = next(s for s in p["segments"] if s["base_offset"] == base_offset)
    options = replace(ConvertOptions.from_dict(plan["options"]), partition_leader_epoch=p["leader_epoch"])
    return SegmentTask(
        source=str(segment_file(p["dir"], base_offset, ".log")),
        staging_dir=str(staging_dir(p["dir"], plan["plan_id"])),
        base_offset=base_offset,
        options=options,
        expected_size=seg["size"],
        expected_mtime_ns=seg["mtime_ns"],
    )


def convert_group(plan: dict[str, Any], task: dict[str, Any]) -> list[dict[str, Any]]:
    """Convert a task's segments into staging; segments the journal already has converted are not redone."""
    log_dir = task["log_dir"]
    _require_local(log_dir)
    journal = _journal(plan, log_dir)
    state = journal.state()
    results = []
    for partition, base in task["segments"]:
        seg = state.segments.get(JournalState.key(partition, base), {})
        if seg.get("state") in ("swapping", "swapped"):
            results.append({"partition": partition, "base": base, "result": seg.get("result"), "skipped": "swapped"})
            continue
        if seg.get("state") == "converted" and _staged_intact(seg["result"]):
            results.append({"partition": partition, "base": base, "result": seg["result"], "skipped": "converted"})
            continue
        result = convert_segment(task_for(plan, log_dir, partition, base))
        journal.append("segment-converted", partition=partition, base=base, result=result.to_dict())
        results.append({"partition": partition, "base": base, "result": result.to_dict(), "skipped": None})
    return results


def _staged_intact(result: dict[str, Any]) -> bool:
    return all(
        Path(p).exists() and Path(p).stat().st_size == result["output_sizes"][sfx]
        for sfx, p in result["outputs"].items()
    )


def verify_partition(plan: dict[str, Any], log_dir: str, partition: str) -> dict[str, Any]:
    """Re-read every staged segment of a partition from disk and check it; journal the verdict."""
    _require_local(log_dir)
    journal = _journal(plan, log_dir)
    state = journal.state()
    p = _partition_entry(plan, log_dir, partition)
    if state.partitions.get(partition) in ("swapped", "rolled-back") or _swap_begun(state, p):
        # verified before its swap began; its staged files are live now
        return {"log_dir": log_dir, "partition": partition, "ok": True, "skipped": "swap begun", "problems": []}
    options = ConvertOptions.from_dict(plan["options"])
    problems: list[str] = []
    records = 0
    for s in p["segments"]:
        seg = state.segments.get(JournalState.key(partition, s["base_offset"]))
        if seg is None or "result" not in seg:
            problems.append(f"segment {s['base_offset']} was not converted")
            continue
        result = SegmentResult.from_dict(seg["result"])
        if result.status != "converted":
            problems.append(f"segment {s['base_offset']}: conversion status {result.status}")
            continue
        check = verify_segment(result, options)
        records += check.records
        problems.extend(f"segment {s['base_offset']}: {x}" for x in check.problems)
    ok = not problems
    journal.append("partition-verified", partition=partition, ok=ok, problems=problems[:20], records=records)
    return {"log_dir": log_dir, "partition": partition, "ok": ok, "problems": problems, "records": records}


def _swap_begun(state: JournalState, partition: dict[str, Any]) -> bool:
    return any(
        state.segments.get(JournalState.key(partition["partition"], s["base_offset"]), {}).get("state")
        in ("swapping", "swapped")
        for s in partition["segments"]
    )


def swap_log_dir(plan: dict[str, Any], log_dir: str) -> dict[str, Any]:
    """Swap every verified partition of the log dir in, under the fence and Kafka's .lock; then lower the fence."""
    _require_local(log_dir)
    entry = _log_dir_entry(plan, log_dir)
    journal = _journal(plan, log_dir)
    state = journal.state()
    if state.log_dir in ("swapped", "finalized"):
        if state.fence_up:  # crashed after the last swap, before the fence came down
            with _lock(log_dir, state):
                lower_fence(log_dir, journal)
        return {"log_dir": log_dir, "swapped": [], "failed": [], "state": state.log_dir}
    swapped, failed = [], []
    with _lock(log_dir, state):
        raise_fence(log_dir, plan["plan_id"], journal)
        for p in entry["partitions"]:
            name = p["partition"]
            now = journal.state()
            verdict = now.partitions.get(name)
            # a partition whose swap began is finished whatever came after: only whole partitions may be live
            if verdict not in ("verified", "swapped") and not _swap_begun(now, p):
                failed.append(name)
                continue
            if verdict != "swapped":
                swap_partition(name, p["dir"], plan["plan_id"], [s["base_offset"] for s in p["segments"]], journal)
            swapped.append(name)
        half = [
            p["partition"] for p in entry["partitions"] if p["partition"] in failed and _swap_begun(journal.state(), p)
        ]
        if half:
            raise MigrateError(f"{log_dir}: partitions {half} are half swapped; the fence stays up. Run rollback.")
        journal.append("logdir-swapped", swapped=swapped, failed=failed)
        lower_fence(log_dir, journal)
    return {"log_dir": log_dir, "swapped": swapped, "failed": failed, "state": "swapped"}


def rollback_log_dir(plan: dict[str, Any], log_dir: str, force: bool = False) -> dict[str, Any]:
    """Put every original file back (bytes and mtimes), remove everything the migration added."""
    _require_local(log_dir)
    entry = _log_dir_entry(plan, log_dir)
    journal = _journal(plan, log_dir)
    state = journal.state()
    if state.log_dir == "finalized":
        raise MigrateError(
            f"{log_dir}: the migration was finalized and its backups deleted; there is nothing to roll back to"
        )
    if state.log_dir == "new" and not journal.path.exists():
        return {"log_dir": log_dir, "state": "nothing to roll back", "journal": ""}
    with _lock(log_dir, state):
        if state.log_dir != "rolled-back":
            raise_fence(log_dir, plan["plan_id"], journal)
            journal.append("rollback-started")
            for p in entry["partitions"]:
                bases = [s["base_offset"] for s in p["segments"]]
                if journal.state().partitions.get(p["partition"]) != "rolled-back":
                    rollback_partition(p["partition"], p["dir"], plan["plan_id"], bases, journal, force)
            for p in entry["partitions"]:
                remove_work_dir(p["dir"], plan["plan_id"])
            journal.append("rollback-finished")
            lower_fence(log_dir, journal)
        text = _take_journal(journal)
    return {"log_dir": log_dir, "state": "rolled-back", "journal": text}


def finalize_log_dir(plan: dict[str, Any], log_dir: str) -> dict[str, Any]:
    """Delete backups and staging once the operator is satisfied; after this there is no rollback."""
    _require_local(log_dir)
    entry = _log_dir_entry(plan, log_dir)
    journal = _journal(plan, log_dir)
    state = journal.state()
    if state.log_dir not in ("swapped", "finalized") or state.fence_up:
        raise MigrateError(
            f"{log_dir}: the migration is not finished (state {state.log_dir}); finish it with `execute --plan` or "
            "undo it with `rollback --plan` first"
        )
    with _lock(log_dir, state):
        for p in entry["partitions"]:
            remove_work_dir(p["dir"], plan["plan_id"])
        journal.append("finalized")
        text = _take_journal(journal)
    return {"log_dir": log_dir, "state": "finalized", "journal": text}


def _lock(log_dir: str, state: JournalState) -> LogDirLock:
    """Kafka's .lock, removed afterwards only if it was not there before the migration began."""
    return LogDirLock(log_dir, remove_after=None if state.lock_existed is None else not state.lock_existed)


def _take_journal(journal: Journal) -> str:
    """The journal's text, removed from the log dir (the driver archives it beside the plan)."""
    text = journal.path.read_text() if journal.path.exists() else ""
    journal.path.unlink(missing_ok=True)
    return text


def status_log_dir(plan: dict[str, Any], log_dir: str) -> dict[str, Any]:
    entry = _log_dir_entry(plan, log_dir)
    state = _journal(plan, log_dir).state()
    partitions = {}
    for p in entry["partitions"]:
        segs = [
            state.segments.get(JournalState.key(p["partition"], s["base_offset"]), {}).get("state", "planned")
            for s in p["segments"]
        ]
        partitions[p["partition"]] = {
            "state": state.partitions.get(p["partition"], segs[0] if len(set(segs)) == 1 else "converting"),
            "segments": {str(s["base_offset"]): st for s, st in zip(p["segments"], segs)},
            "problems": state.problems.get(p["partition"], []),
        }
    return {"log_dir": log_dir, "state": state.log_dir, "fence_up": state.fence_up, "partitions": partitions}


def verify_live_log_dir(plan: dict[str, Any], log_dir: str) -> dict[str, Any]:
    """After a swap: re-check the live segments against what the journal says was swapped in."""
    from migrate.swap import live_changes

    _require_local(log_dir)
    entry = _log_dir_entry(plan, log_dir)
    state = _journal(plan, log_dir).state()
    options = ConvertOptions.from_dict(plan["options"])
    problems: list[str] = []
    for p in entry["partitions"]:
        bases = [s["base_offset"] for s in p["segments"]]
        problems += live_changes(p["partition"], p["dir"], bases, state)
        for base in bases:
            seg = state.segments.get(JournalState.key(p["partition"], base), {})
            if seg.get("state") != "swapped":
                continue
            result = SegmentResult.from_dict(seg["result"])
            result.outputs = {sfx: str(segment_file(p["dir"], base, sfx)) for sfx in SEGMENT_SUFFIXES}
            check = verify_segment(result, options)
            problems += [f"{p['partition']}/{base}: {x}" for x in check.problems]
    return {"log_dir": log_dir, "ok": not problems, "problems": problems, "state": state.log_dir}
