"""A canary-broker rehearsal: migrate one broker's data, prove it right, roll back, prove the originals came
back byte for byte, and time every step to size the cluster's maintenance window. Kafka's own upgrade plan for the
message-format change (KIP-32) starts with one canary broker and rolls it back if anything goes wrong; this is that
rehearsal, offline.

The steps, in order (``copy`` only with ``--on-copy``)::

    fingerprint   every file and directory under the log dirs: path, kind, size, mtime, mode, inode, sha256
    copy          the log dirs copied into DIR: segments as hard links (else reflinks, else plain copies), the
                  broker's small files (checkpoints, meta.properties, .lock, ...) always as plain copies; the copy is
                  fingerprinted and checked against the source
    plan-check    ``plan --check``: every entry read, every CRC checked; a refusal names the file and byte position
    baseline      Apache Kafka's own reader (the oracle) and kafka-python read every partition before anything changes;
                  with --clients, this host's consumers read them too, through the read-only endpoint
    execute       the pipeline's execute
    verify        our verifier, an independent scan, the oracle and kafka-python on the live files
    clients       with --clients: the same consumers read the converted data; each must read every record exactly
    rollback      the pipeline's rollback (refused over live files changed after the swap unless --force)
    compare       a second fingerprint, which must equal the first exactly (on a copy, the source's too)

After a failure the rehearsal still puts the data back: a failed execute or verify is rolled back, and ``compare``
always runs, so the report says whether the broker's files are as they were. The rehearsal's own progress lives in a
small JSON state file beside the report, written atomically after every step: a crash or Ctrl-C leaves a state
``rehearse --resume`` finishes (the pipeline's verbs themselves resume after a crash).

The steps are one table (``STEPS``): each row names a step, the function that runs it, when it is skipped, and
whether its failure halts the rest; ``Rehearsal`` runs the rows in order. Everything here is engine-free: the command
hands in a factory for the engine execute, verify and rollback run on. The records are in ``records``, the
fingerprints in ``fingerprint``, the copy in ``copy``, the readers in ``readers``, the window in ``projection`` and the
state file and report in ``report``.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from migrate import __version__, pipeline
from migrate.engines import Engine
from migrate.errors import MigrateError, PlanRefusedError
from migrate.kafka.layout import validate_log_dir_path
from migrate.kafka.lock import lock_holder
from migrate.model.plan_tree import Plan
from migrate.model.run_state import LogDirPhase, PartitionState
from migrate.planning.plan import build_plan, load_plan, write_plan
from migrate.planning.request import PlanRequest
from migrate.rehearse import clients as consumers
from migrate.rehearse.copy import COPY_MARKER, copy_log_dir, copy_method_words, copy_targets
from migrate.rehearse.fingerprint import compare_fingerprints, dereferenced, fingerprint_tree
from migrate.rehearse.readers import ORACLE_READER, disagreements, judge_after, read_partitions, scan_verdict
from migrate.rehearse.records import (
    REHEARSAL_VERSION,
    STEP_ORDER,
    CopyReport,
    ExecuteSummary,
    Growth,
    PlanSummary,
    ReaderVerdict,
    Refusal,
    RehearsalConfig,
    RehearsalReport,
    RehearsalState,
    StepRecord,
    StepStatus,
    now,
    step_names,
)
from migrate.rehearse.report import (
    RehearsalPaths,
    build_report,
    finished,
    load_state,
    save_state,
    write_report,
)
from migrate.run import faults
from migrate.run.workspace import write_durably
from migrate.units import human_bytes


class StepFailed(MigrateError):
    """A step ran and did not pass: the message says what, where, and what to do."""


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class RehearsalLock:
    """One rehearsal per state file: an fcntl lock on ``<report>.lock`` (released by the kernel however we end)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> RehearsalLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise MigrateError(
                    f"another `kafka-log-migrate rehearse` holds {self.path}: wait for it to finish, or use another "
                    "-o for a separate rehearsal."
                ) from None
            raise
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None


EngineFactory = Callable[[], tuple[Engine, str]]
AfterStep = Callable[[str, RehearsalState], None]


def new_state(config: RehearsalConfig, paths: RehearsalPaths) -> RehearsalState:
    """A fresh rehearsal's state, refused where it would fingerprint its own files or copy a log dir into itself."""
    sources = [Path(d).resolve() for d in config.log_dirs]
    ours = [paths.report, paths.state, paths.plan, paths.lock, Path(f"{paths.plan}.state")]
    for d in sources:
        for p in ours:
            if _inside(p, d):
                raise MigrateError(
                    f"{p} would be inside the log dir {d}: the rehearsal fingerprints every file there and must not "
                    "find its own. Give -o a path outside the broker's log dirs."
                )
    if config.on_copy:
        dest = Path(config.on_copy).resolve()
        config = dataclasses.replace(config, on_copy=str(dest))
        for d in sources:
            if _inside(dest, d) or _inside(d, dest):
                raise MigrateError(
                    f"--on-copy {dest} and the log dir {d} contain one another; give --on-copy a directory outside "
                    "the broker's log dirs (on the same filesystem, so segment files can be hard links)."
                )
        for p in ours:
            if _inside(p, dest):
                raise MigrateError(f"{p} would be inside the copy {dest}; give -o a path outside --on-copy.")
    # one spelling of each path: the plan resolves log dirs, and readers' views are matched against it
    config = dataclasses.replace(config, log_dirs=tuple(str(d) for d in sources))
    return RehearsalState(
        version=REHEARSAL_VERSION,
        id=secrets.token_hex(6),
        tool=f"kafka-log-migrate {__version__}",
        host=socket.gethostname(),
        started=now(),
        config=config,
        report_path=str(paths.report),
        plan_path=str(paths.plan),
    )


class Rehearsal:
    """Runs (or resumes) the rows of ``STEPS``, saving the state and the report after each; the steps reach the
    state, the paths, the plan and the engine (made when first needed) through it."""

    def __init__(
        self,
        state: RehearsalState,
        paths: RehearsalPaths,
        engine_factory: EngineFactory,
        after_step: AfterStep | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.state = state
        self.paths = paths
        self.engine_factory = engine_factory
        self.after_step = after_step
        self.on_event = on_event
        self._engine: Engine | None = None
        self.accelerator = ""

    def run(self) -> RehearsalReport:
        with RehearsalLock(self.paths.lock):
            try:
                self._run_steps()
            finally:
                if self._engine is not None:
                    self._engine.close()
                    self._engine = None
                self.save()
            return write_report(self.state, self.paths, html=True)

    def _run_steps(self) -> None:
        rerun = False
        names = step_names(self.state.config)
        steps = [s for s in STEPS if s.name in names]
        for step in steps:
            name = step.name
            record = self.state.step(name)
            if record is not None and not rerun:
                if record.status == StepStatus.RUNNING:
                    self.event(
                        f"step {name} was running when the process ended (killed or crashed; started {record.started}, "
                        f"attempt {record.attempts}): resuming it"
                    )
                    rerun = True
                elif record.status == StepStatus.INTERRUPTED:
                    self.event(f"step {name} was interrupted by Ctrl-C: resuming it")
                    rerun = True
                elif record.status == StepStatus.FAILED and name == "rollback":
                    self.event(
                        "rollback failed last time: trying it again"
                        + (" with --force" if self.state.config.force else "")
                    )
                    rerun = True
                else:
                    continue
            why_not = step.skip(self.state, name)
            if why_not:
                self.state.set_step(StepRecord(name, StepStatus.SKIPPED, now(), message=why_not))
                self.save()
                continue
            status = self._run_step(step, record)
            if step.halts and status != StepStatus.PASSED:
                for rest in names[names.index(name) + 1 :]:
                    self.state.set_step(StepRecord(rest, StepStatus.SKIPPED, now(), message=f"{name} failed"))
                self.save()
                return

    def _run_step(self, step: Step, previous: StepRecord | None) -> StepStatus:
        name = step.name
        attempts = previous.attempts + 1 if previous is not None else 1
        started = now()
        self.state.set_step(StepRecord(name, StepStatus.RUNNING, started, attempts=attempts))
        self.event(f"step {name} started" + (f" (attempt {attempts})" if attempts > 1 else ""))
        self.save()
        clock = time.perf_counter()
        status, message, done_bytes = StepStatus.PASSED, "", 0
        try:
            done_bytes, message = step.run(self)
        except MigrateError as exc:  # StepFailed included: the message is written for the operator
            status, message = StepStatus.FAILED, str(exc)
        except KeyboardInterrupt:
            seconds = round(time.perf_counter() - clock, 3)
            self.state.set_step(
                StepRecord(name, StepStatus.INTERRUPTED, started, seconds, attempts, message="interrupted by Ctrl-C")
            )
            self.event(f"step {name} interrupted by Ctrl-C after {seconds} s")
            self.save()
            raise
        except Exception as exc:  # a bug or an I/O error: still roll back and compare, and say what it was
            status, message = StepStatus.FAILED, f"{type(exc).__name__}: {exc}"
        seconds = round(time.perf_counter() - clock, 3)
        rate = done_bytes / seconds if done_bytes and seconds > 0 else None
        self.state.set_step(StepRecord(name, status, started, seconds, attempts, done_bytes, rate, message))
        self.event(
            f"step {name} {status.value} in {seconds} s" + (f": {message}" if status != StepStatus.PASSED else "")
        )
        self.save()
        faults.point(f"rehearse:after-{name}")
        if self.after_step is not None:
            self.after_step(name, self.state)
        return status

    def event(self, text: str) -> None:
        """A line of the rehearsal's history, also shown to the operator as it happens (a rehearsal runs for minutes:
        piped or not, the terminal must not stay silent that long)."""
        self.state.event(text)
        if self.on_event is not None:
            self.on_event(text)

    def save(self) -> None:
        save_state(self.state, self.paths)
        write_report(self.state, self.paths)

    def engine(self) -> Engine:
        if self._engine is None:
            clock = time.perf_counter()
            self._engine, self.accelerator = self.engine_factory()
            self.state.engine = self._engine.name
            self.state.engine_start_seconds = round(time.perf_counter() - clock, 3)
        return self._engine

    def plan(self) -> Plan:
        return load_plan(self.paths.plan)

    def clients_work(self) -> Path:
        """Where the consumers' drivers write what they read (removed once judged), beside the report."""
        return self.paths.report.with_name(f"{self.paths.report.stem}.clients")

    def clients_reference(self) -> Path:
        """Kafka's reader of the originals, as digests, from baseline to the clients step, beside the report."""
        return self.paths.report.with_name(f"{self.paths.report.stem}.clients-reference.jsonl")


# --- the steps: each returns the input bytes it worked through and its line for the report, or raises StepFailed -


def fingerprint_step(run: Rehearsal) -> tuple[int, str]:
    problems = [p for p in (validate_log_dir_path(d) for d in run.state.config.log_dirs) if p]
    if problems:
        raise StepFailed("; ".join(problems))
    fps = {d: fingerprint_tree(d) for d in run.state.config.log_dirs}
    run.state.source_before = fps
    if not run.state.config.on_copy:
        run.state.targets = run.state.config.log_dirs
        run.state.target_before = fps
    files = sum(f.files for f in fps.values())
    size = sum(f.bytes for f in fps.values())
    return size, f"{files} files, {sum(f.dirs for f in fps.values())} directories, {human_bytes(size)}"


def copy_step(run: Rehearsal) -> tuple[int, str]:
    config = run.state.config
    assert config.on_copy
    dest = Path(config.on_copy).resolve()
    targets = copy_targets(config.log_dirs, dest)
    marker = dest / COPY_MARKER
    if marker.exists() and marker.read_text().strip() == run.state.id:
        for t in targets:  # a copy cut short by a crash: ours alone (the marker says so), so start it again
            if t.exists():
                shutil.rmtree(t)
    elif dest.exists() and any(dest.iterdir()):
        raise StepFailed(
            f"--on-copy {dest} is not empty: the copy must not mix with other files. Give an empty or new "
            "directory on the same filesystem as the log dirs."
        )
    for d in config.log_dirs:
        holder = lock_holder(d)
        if holder is not None:
            raise StepFailed(
                f"{d}/.lock is held{f' by process {holder}' if holder else ''}: a broker is running on the "
                "canary, and hard-linked segments would share the files it appends to. Stop the broker cleanly, "
                "then rehearse again."
            )
    dest.mkdir(parents=True, exist_ok=True)
    write_durably(marker, run.state.id + "\n")
    run.state.targets = tuple(map(str, targets))
    run.save()  # the targets are known before any file exists there
    copies = [copy_log_dir(src, dst) for src, dst in zip(config.log_dirs, targets)]
    run.state.target_before = {str(t): fingerprint_tree(t) for t in targets}
    fidelity = []
    for c in copies:
        src = dereferenced(run.state.source_before[c.source])
        dst = run.state.target_before[c.copy]
        fidelity.append(compare_fingerprints("copy against its source", src, dst, inodes=False))
    run.state.copy = CopyReport(str(dest), copy_method_words(copies), tuple(copies), tuple(fidelity))
    differing = [f for f in fidelity if not f.identical]
    if differing:
        first = differing[0].changes[0]
        raise StepFailed(
            f"the copy {differing[0].after_root} differs from its source at {first.path} ({first.change}: "
            f"{first.before} -> {first.after}); was the canary's data changing while it was copied? Stop the "
            "broker and rehearse again."
        )
    size = sum(c.bytes for c in copies)
    return size, f"{sum(c.files for c in copies)} files into {dest}: {run.state.copy.method}"


def plan_check_step(run: Rehearsal) -> tuple[int, str]:
    c = run.state.config
    request = PlanRequest(
        log_dirs=run.state.targets,
        options=c.options,
        topics=c.topics,
        leader_epoch=c.leader_epoch,
        allow_unclean=c.allow_unclean,
        check=True,
        task_bytes=c.task_bytes,
        task_segments=c.task_segments,
        free_bytes_cap=c.free_bytes_cap,
        compact=c.compact,
        drop_tombstones_older_than_ms=c.drop_tombstones_older_than_ms,
        compact_memory_limit=c.compact_memory_limit,
        range_bytes=c.range_bytes,
    )
    try:
        plan = build_plan(request)
    except PlanRefusedError as exc:
        refusals = [Refusal.of("plan-check", p) for p in exc.problems]
        run.state.refusals = (*run.state.refusals, *refusals)
        first = refusals[0]
        raise StepFailed(
            f"plan --check refused ({len(refusals)} problem{'s' if len(refusals) > 1 else ''}; nothing was "
            f"executed). First: {first.message}"
        ) from None
    write_plan(plan, run.paths.plan)
    est = plan.estimates
    run.state.plan = PlanSummary(
        plan.plan_id,
        str(run.paths.plan),
        est.partitions,
        est.segments,
        est.bytes,
        est.estimated_output_bytes,
        plan.warnings,
    )
    return est.bytes, (
        f"plan {plan.plan_id}: {est.partitions} partitions, {est.segments} segments, {human_bytes(est.bytes)}, "
        "every entry read and every CRC checked"
    )


def baseline_step(run: Rehearsal) -> tuple[int, str]:
    verdicts, oracle_view, kp_view = read_partitions(run.state.config, run.state.targets, "baseline")
    run.state.baseline_oracle = oracle_view
    run.state.baseline_independent = kp_view
    problems = disagreements(oracle_view, kp_view) if oracle_view and kp_view else []
    verdicts = [
        dataclasses.replace(
            v,
            ok=not problems,
            detail=f"read {v.partitions} partitions of the originals in {v.seconds} s",
            problems=tuple(problems[:50]),
        )
        if v.available
        else v
        for v in verdicts
    ]
    run.state.readers = (*[x for x in run.state.readers if x.stage != "baseline"], *verdicts)
    if problems:
        raise StepFailed(
            f"Kafka's reader and kafka-python disagree on the originals of {len(problems)} partition(s), e.g. "
            f"{problems[0]}. Nothing was executed; inspect with `kafka-log-migrate dump --deep-iteration`."
        )
    available = [v.reader for v in verdicts if v.available]
    line = f"originals read by {', '.join(available)}" if available else "no independent reader available here"
    if run.state.config.clients:
        before = consumers.consume(
            run.state.config, run.state.targets, "before", run.clients_work(), run.clients_reference()
        )
        run.state.clients_before = before
        line += f"; {len(before.verdicts)} consumers read them through the read-only endpoint: " + ", ".join(
            f"{v.label} {v.outcome}" for v in before.verdicts
        )
    return (run.state.plan.bytes if run.state.plan else 0), line


def execute_step(run: Rehearsal) -> tuple[int, str]:
    plan = run.plan()
    engine = run.engine()
    report = pipeline.execute(plan, engine, accelerator=run.accelerator)
    t = report.totals
    unmigrated = tuple(report.unmigrated)
    run.state.execute = ExecuteSummary(
        plan_id=report.plan_id,
        engine=report.engine,
        ok=report.ok,
        totals=t,
        stage_seconds=report.stage_seconds,
        partitions=sum(len(d.partitions) for d in plan.log_dirs),
        migrated=sum(1 for d in report.log_dirs for p in d.partitions if p.state == PartitionState.MIGRATED),
        unmigrated=unmigrated[:200],
        errors=report.errors,
        accelerator=report.accelerator,
    )
    if t.bytes_in:
        run.state.growth = Growth(
            bytes_in=t.bytes_in,
            bytes_out=t.bytes_out,
            growth_bytes=t.bytes_out - t.bytes_in,
            growth_ratio=round((t.bytes_out - t.bytes_in) / t.bytes_in, 4),
            estimated_output_bytes=plan.estimates.estimated_output_bytes,
            held_until_finalize_bytes=t.bytes_out,
        )
    refusals = [Refusal.of("execute", o.problem) for o in report.problems if o.problem is not None]
    refusals += [Refusal("execute", f"{e.stage} of {e.log_dir}: {e.message}") for e in report.errors]
    run.state.refusals = (*[x for x in run.state.refusals if x.step != "execute"], *refusals)
    if not report.ok:
        first = refusals[0].message if refusals else f"{len(unmigrated)} partition(s) not migrated"
        raise StepFailed(
            f"execute migrated {run.state.execute.migrated} of {run.state.execute.partitions} partitions "
            f"({t.refused} segments refused, {t.failed} failed). First: {first}"
        )
    growth = f" ({(t.bytes_out - t.bytes_in) / t.bytes_in:+.1%})" if t.bytes_in else ""
    return plan.estimates.bytes, (
        f"{t.verified} segments converted and verified, {t.records} records, {human_bytes(t.bytes_in)} -> "
        f"{human_bytes(t.bytes_out)}{growth}; every planned partition migrated"
    )


def verify_step(run: Rehearsal) -> tuple[int, str]:
    plan = run.plan()
    engine = run.engine()
    verdicts: list[ReaderVerdict] = []
    clock = time.perf_counter()
    ours = pipeline.verify_live(plan, engine)
    run.state.verify_seconds = round(time.perf_counter() - clock, 3)
    problems = [p for c in ours.log_dirs for p in c.problems]
    problems += [f"{e.log_dir}: {e.message}" for e in ours.errors]
    problems += [f"{c.log_dir}: {p} is not migrated" for c in ours.log_dirs for p in c.unmigrated]
    checked = sum(c.checked_segments for c in ours.log_dirs)
    verdicts.append(
        ReaderVerdict(
            "kafka-log-migrate verify",
            "verify",
            True,
            ours.ok,
            run.state.verify_seconds,
            sum(len(d.partitions) for d in plan.log_dirs),
            f"{checked} live segments re-read: identity, content digest, CRCs, indexes",
            tuple(problems[:50]),
        )
    )
    verdicts.append(scan_verdict(run.state.targets, plan))
    planned = {p.dir for d in plan.log_dirs for p in d.partitions}
    readers, oracle_view, kp_view = read_partitions(run.state.config, run.state.targets, "verify")
    for v in readers:
        if not v.available or v.ok is False:
            verdicts.append(v)
            continue
        before = run.state.baseline_oracle if v.reader == ORACLE_READER else run.state.baseline_independent
        after = oracle_view if v.reader == ORACLE_READER else kp_view
        if not before:
            verdicts.append(
                dataclasses.replace(
                    v, available=False, ok=None, detail="not available: it could not read the originals"
                )
            )
            continue
        found = judge_after(v.reader, before, after, planned, plan.options)
        detail = (
            f"{len(after)} partitions read in {v.seconds} s: the same records (sha256 per partition) as before "
            "execute, planned partitions all in the target format and valid"
            if not found
            else f"{len(found)} problem(s)"
        )
        verdicts.append(dataclasses.replace(v, ok=not found, detail=detail, problems=tuple(found[:50])))
    run.state.readers = (*[x for x in run.state.readers if x.stage != "verify"], *verdicts)
    failed = [v for v in verdicts if v.available and not v.ok]
    if failed:
        first = failed[0]
        raise StepFailed(
            f"{first.reader} found {len(first.problems) or 'a'} problem(s) in the migrated data, e.g. "
            f"{first.problems[0] if first.problems else first.detail}. The rollback puts the originals back."
        )
    used = ", ".join(v.reader for v in verdicts if v.available)
    return plan.estimates.bytes, f"{checked} segments; agreed by {used}"


def clients_step(run: Rehearsal) -> tuple[int, str]:
    after = consumers.consume(run.state.config, run.state.targets, "after", run.clients_work(), run.clients_reference())
    run.state.clients_after = after
    if not after.verdicts:
        raise StepFailed(
            "--clients, but no consumer could run on this host: " + "; ".join(after.missing) + ". Install one "
            "(pip install confluent-kafka kafka-python aiokafka, or --kafka-home for the Java client), then rehearse "
            "again."
        )
    failed = consumers.failures_after(after)
    if failed:
        first = failed[0]
        where = (
            f" (first: {first.differences[0].partition} offset {first.differences[0].offset})"
            if first.differences
            else ""
        )
        raise StepFailed(
            f"{len(failed)} consumer(s) do not read the converted data exactly: {first.label}: {first.summary}"
            f"{where}. Do not migrate: the rollback puts the originals back; read the clients table of the report."
        )
    return (run.state.plan.bytes if run.state.plan else 0), (
        f"{len(after.verdicts)} consumers read every converted record exactly (against {after.reference}): "
        + ", ".join(v.label for v in after.verdicts)
    )


def changed_live_file(refused: str) -> str:
    """The file a rollback refusal names: ``LeaveReport.refused`` holds text, each line ``<live file>: <its fate>:
    <what the broker did>`` (``migrate.stages.rollback``)."""
    return refused.split(": ", 1)[0]


def rollback_step(run: Rehearsal) -> tuple[int, str]:
    plan = run.plan()
    engine = run.engine()
    report = pipeline.rollback(plan, engine, run.paths.plan, force=run.state.config.force)
    run.state.rollback = report
    if report.refused:
        run.state.refusals = (
            *[x for x in run.state.refusals if x.step != "rollback"],
            *(Refusal("rollback", x, file=changed_live_file(x)) for x in report.refused),
        )
        raise StepFailed(
            f"rollback refused: {len(report.refused)} live file(s) changed after the swap, so something (a "
            f"broker?) wrote to them; nothing was put back. First: {report.refused[0]}. Stop whatever wrote them; "
            "`rehearse --resume --force` (or `rollback --force`) puts the originals back and loses those writes."
        )
    # a rollback that finished before a crash left no state in the log dir, only its archive beside the plan
    done = all(
        r.phase == LogDirPhase.ROLLED_BACK
        or (r.phase == LogDirPhase.NEW and pipeline.archive_path(run.paths.plan, r.log_dir).exists())
        for r in report.rollbacks
    )
    if report.errors or not done or len(report.rollbacks) != len(plan.log_dirs):
        why = report.errors[0].message if report.errors else "a log dir did not end rolled back"
        raise StepFailed(f"rollback did not finish: {why}. Fix the cause and run `rehearse --resume`.")
    restored = sum(len(r.restored) for r in report.rollbacks)
    forced = " (forced over changed live files)" if any(r.forced and r.changed for r in report.rollbacks) else ""
    return plan.estimates.bytes, f"{restored} partitions restored{forced}"


def compare_step(run: Rehearsal) -> tuple[int, str]:
    comparisons = []
    for t in run.state.targets:
        after = fingerprint_tree(t)
        what = "rehearsed copy" if run.state.config.on_copy else "rehearsed log dir"
        comparisons.append(compare_fingerprints(what, run.state.target_before[t], after))
    if run.state.config.on_copy:
        for d in run.state.config.log_dirs:
            after = fingerprint_tree(d)
            comparisons.append(
                compare_fingerprints("canary log dir (source of the copy)", run.state.source_before[d], after)
            )
    run.state.comparisons = tuple(comparisons)
    differing = [c for c in comparisons if not c.identical]
    if differing:
        c = differing[0]
        first = c.changes[0]
        raise StepFailed(
            f"the {c.what} {c.after_root} is not as it was: {c.total_changes} difference(s), first {first.path} "
            f"({first.change}: {first.before or '-'} -> {first.after or '-'})"
        )
    entries = sum(c.entries_after for c in comparisons)
    return 0, f"{entries} entries identical (paths, sizes, sha256, mtimes, modes, inodes)"


# --- when a step is skipped ---------------------------------------------------------------------------------------


def _failed(state: RehearsalState, name: str) -> bool:
    record = state.step(name)
    return record is not None and record.status != StepStatus.PASSED


def _never(state: RehearsalState, name: str) -> str:
    return ""


def _unless_all_before_passed(state: RehearsalState, name: str) -> str:
    order = step_names(state.config)
    broken = next((s for s in order[: order.index(name)] if _failed(state, s)), None)
    return f"not run: {broken} did not pass, so nothing was executed" if broken else ""


def _unless_executed(state: RehearsalState, name: str) -> str:
    if not _failed(state, "execute"):
        return ""
    ex = state.step("execute")
    if ex is not None and ex.status == StepStatus.SKIPPED:
        return "not run: nothing was executed"
    return "not run: execute did not migrate every partition (the rollback puts them back)"


def _unless_anything_executed(state: RehearsalState, name: str) -> str:
    ex = state.step("execute")
    return "not needed: nothing was executed" if ex is None or ex.status == StepStatus.SKIPPED else ""


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Rehearsal], tuple[int, str]]  # the input bytes it worked through, and its line in the report
    skip: Callable[[RehearsalState, str], str] = _never  # why it does not run now ("" if it does)
    # nothing else can be judged without the first fingerprint or the copy: their failure skips the rest
    halts: bool = False


STEPS: tuple[Step, ...] = (
    Step("fingerprint", fingerprint_step, halts=True),
    Step("copy", copy_step, halts=True),
    Step("plan-check", plan_check_step, _unless_all_before_passed),
    Step("baseline", baseline_step, _unless_all_before_passed),
    Step("execute", execute_step, _unless_all_before_passed),
    Step("verify", verify_step, _unless_executed),
    Step("clients", clients_step, _unless_executed),
    Step("rollback", rollback_step, _unless_anything_executed),
    Step("compare", compare_step),
)
assert tuple(s.name for s in STEPS) == STEP_ORDER


def start(
    config: RehearsalConfig,
    paths: RehearsalPaths,
    engine_factory: EngineFactory,
    after_step: AfterStep | None = None,
    on_event: Callable[[str], None] | None = None,
) -> RehearsalReport:
    """A new rehearsal; refused while an unfinished one is recorded at ``paths``."""
    if paths.state.exists():
        old = load_state(paths.state)
        if not finished(old):
            report = build_report(old, paths)
            raise MigrateError(
                f"an unfinished rehearsal is recorded in {paths.state} ({report.verdict}). Finish it with "
                f"`kafka-log-migrate rehearse --resume -o {paths.report}`; or, if you have rolled its data back "
                f"yourself (`kafka-log-migrate rollback --plan {paths.plan}`), delete {paths.state} and start again."
            )
    state = new_state(config, paths)
    paths.report.parent.mkdir(parents=True, exist_ok=True)
    state.event(f"rehearsal {state.id} started on {state.host}: log dirs {', '.join(config.log_dirs)}")
    return Rehearsal(state, paths, engine_factory, after_step, on_event).run()


def resume(
    paths: RehearsalPaths,
    engine_factory: EngineFactory,
    force: bool = False,
    after_step: AfterStep | None = None,
    on_event: Callable[[str], None] | None = None,
) -> RehearsalReport:
    """Continue the rehearsal recorded at ``paths`` from where it stopped (a finished one is only reported)."""
    if not paths.state.exists():
        raise MigrateError(
            f"no rehearsal state at {paths.state}: nothing to resume. Give the -o of the rehearsal to resume, or start "
            "one with `kafka-log-migrate rehearse --log-dirs ...`."
        )
    state = load_state(paths.state)
    if finished(state):
        with RehearsalLock(paths.lock):
            return write_report(state, paths, html=True)
    if force and not state.config.force:
        state.config = dataclasses.replace(state.config, force=True)
    state.event(f"resumed on {socket.gethostname()}" + (" with --force" if force else ""))
    return Rehearsal(state, paths, engine_factory, after_step, on_event).run()
