"""The rolling cut-over: one broker at a time, each only once the cluster can spare it.

Before the first stop, the run refuses what would end it badly later: a broker or topic whose leaders write (or may
write) v0/v1 batches (``gate.judge_formats``: followers copy what their leader writes, so converted brokers would
gain legacy data again), and on each broker's worker every refusal its plan would meet that can be told while it
runs (``checks.before_stop``: an earlier migration not finalized, a fence).

For each broker, in the order given (the canary first):

1. the gate (``gate.py``; Kafka's Admin API and/or the operator's command), asked again until it opens or its
   timeout passes: nothing is stopped while it says no;
2. the operator's stop command (``--stop-command 'systemctl stop kafka@{broker}'``);
3. on the broker's worker, until each log dir's ``.lock`` is released and its clean-shutdown marker is there: a broker
   that stopped uncleanly (killed, crashed) is refused, since Kafka must recover that log before anything reads it;
4. its plan, made on its worker after the stop (as ``plan --log-dirs``), written beside the run, and ``execute`` of it
   (the same library functions: where the broker pre-staged, the cut-over takes what it staged);
5. the operator's start command, then the gate again: the next broker waits until this one is back in sync.

After the last broker, every broker's log dirs are scanned through its worker (as ``scan``): the run says the
cluster is v2-only only when no partition anywhere holds a v0/v1 batch, and names each one that does.

The run stops at the first failure and says which broker, in what state, and what to run next; it never goes on
to the next broker after one failed. Each broker's plan is its own (``broker-<id>.plan.json``), so ``status``,
``verify``, ``rollback`` and ``finalize`` take it as after any cluster run.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate import pipeline
from migrate.engines import StageCall
from migrate.errors import ClusterPlanRefusedError, MigrateError
from migrate.model.plan_tree import ConvertOptions, TimestampPolicy
from migrate.model.run_state import Stage
from migrate.planning.cluster import merge, survey_broker
from migrate.planning.plan import write_plan
from migrate.planning.request import PlanRequest
from migrate.prestage.replicas import (
    DifferenceKind,
    StagedDifference,
    StagedDigest,
    compare_staged,
    differences_with,
)
from migrate.rolling.broker_host import (
    LegacyLeft,
    LogDirRelease,
    WorkerBroker,
    cut_over_refusals,
    identify,
    legacy_left,
    release_state,
)
from migrate.rolling.gate import GateVerdict
from migrate.rolling.operator_gate import Gate, for_broker, run_operator_command, wait_for_go
from migrate.stages.replicas import converted_digests, peer_staged_digests
from migrate.units import human_seconds


class Step(str, enum.Enum):
    FORMATS = "write-format check"  # before the first stop: every broker writes v2
    GATE = "gate"
    REFUSALS = "refusal check"  # what would refuse this broker's plan, asked while it runs
    STOP = "stop"
    RELEASE = "release"  # the log dirs' lock released and the clean-shutdown marker written
    PLAN = "plan"
    EXECUTE = "execute"
    START = "start"
    GATE_AFTER = "gate-after-start"


@dataclass(frozen=True)
class StepRecord:
    step: Step
    ok: bool
    seconds: float
    detail: str = ""


@dataclass(frozen=True)
class BrokerCutover:
    broker: int
    ok: bool
    steps: tuple[StepRecord, ...]
    plan_path: str = ""
    failure: str = ""  # which step failed, the broker's state, and what to run next


@dataclass(frozen=True)
class RollingSettings:
    brokers: tuple[int, ...]  # in order: the canary first
    request: PlanRequest  # the plan options, and the log dirs when no broker config is given
    stop_command: str
    start_command: str
    run_dir: Path  # each broker's plan is written here
    broker_config: str | None = None  # server.properties on each broker host, instead of log dirs
    gate_timeout_s: float = 600.0
    gate_interval_s: float = 10.0
    release_timeout_s: float = 300.0
    release_interval_s: float = 1.0
    command_timeout_s: float = 600.0
    require_consistent_replicas: bool = False


@dataclass(frozen=True)
class RollingReport:
    ok: bool  # every broker of the run cut over and back in service
    brokers: tuple[BrokerCutover, ...]
    not_started: tuple[int, ...] = ()
    gate_verdicts: tuple[GateVerdict, ...] = field(default=())
    refused: str = ""  # why the run stopped no broker at all
    scanned: tuple[LegacyLeft, ...] = ()  # every broker's log dirs after the last cut-over

    @property
    def v2_only(self) -> bool:
        """Certified: every broker's log dirs were read after the run and hold v2 batches only."""
        return self.ok and bool(self.scanned) and all(s.v2_only for s in self.scanned)


MTIME_REFUSAL = (
    "--timestamps mtime in a rolling run would give the same offsets different timestamps on different brokers: each "
    "replica's v0 segments get LogAppendTime from that broker's own segment mtime, and while converted and legacy "
    "replicas are both served, a consumer (or a follower fetching from a converted leader) sees the timestamp of "
    "whichever broker it reads. Use --timestamps none (Kafka's own cleaner's CreateTime -1; pre-stage with the same "
    "option), or give --accept-per-broker-timestamps to accept the difference."
)


def refuse_unsafe_options(options: ConvertOptions, accept_per_broker_timestamps: bool) -> None:
    """Options that are safe for a one-shot offline run but not while converted and legacy replicas serve together."""
    if options.timestamps == TimestampPolicy.MTIME and not accept_per_broker_timestamps:
        raise MigrateError(MTIME_REFUSAL)


def find_workers(engine: Any, settings: RollingSettings) -> dict[int, WorkerBroker]:
    """Each broker's worker, by the broker id its log dirs hold; refused when a broker of the run has none."""
    workers = engine.workers(expect=len(settings.brokers))
    calls = [StageCall((settings.request.log_dirs, settings.broker_config, w), host=w) for w in workers]
    found: dict[int, WorkerBroker] = {}
    problems: list[str] = []
    claimed_twice: set[int] = set()
    for call, r in zip(calls, engine.map(Stage.SURVEY, identify, calls)):
        who = r.value if r.ok else WorkerBroker(call.host or "?", None, (), r.error)
        if who.broker_id is None:
            problems.append(f"worker {who.worker}: {who.problem}")
        elif who.broker_id in found:
            claimed_twice.add(who.broker_id)
            problems.append(
                f"broker {who.broker_id} is claimed by workers {found[who.broker_id].worker} and {who.worker}"
            )
        else:
            found[who.broker_id] = who
    missing = [b for b in settings.brokers if b not in found]
    problems += [
        f"broker {b} has no worker. On its host run: dask worker {engine.address} --name broker-{b} --nthreads 1 "
        "(with the TLS options)"
        for b in missing
    ]
    if missing or claimed_twice & set(settings.brokers):
        raise MigrateError("cannot start the rolling run, nothing was stopped: " + "; ".join(problems))
    return found


class RollingRun:
    """One rolling run over ``settings.brokers`` on ``engine`` (a DaskEngine on the cluster's scheduler)."""

    def __init__(
        self,
        engine: Any,
        settings: RollingSettings,
        gates: Sequence[Gate],
        say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.gates = gates
        self.say = say
        self.clock = clock
        self.verdicts: list[GateVerdict] = []
        self.workers: dict[int, WorkerBroker] = {}

    def run(self) -> RollingReport:
        workers = find_workers(self.engine, self.settings)
        self.workers = workers
        brokers = self.settings.brokers
        refused = self._refused_before_any_stop()
        if refused:
            self.say(refused)
            return RollingReport(False, (), brokers, tuple(self.verdicts), refused=refused)
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        done: list[BrokerCutover] = []
        for i, broker in enumerate(brokers):
            self.say(f"broker {broker}: cut-over {i + 1} of {len(brokers)}")
            result = self.cut_over(broker, workers[broker], rest=brokers[i:])
            done.append(result)
            if not result.ok:
                self.say(result.failure)
                return RollingReport(False, tuple(done), brokers[i + 1 :], tuple(self.verdicts))
            self.say(f"broker {broker}: converted and back in service (plan {result.plan_path})")
        return RollingReport(True, tuple(done), (), tuple(self.verdicts), scanned=self._scan_every_broker())

    def _refused_before_any_stop(self) -> str:
        """Why the run must not stop any broker: a broker or topic that writes legacy batches, or a broker whose
        plan would be refused after its stop; "" when there is nothing."""
        formats = [v for g in self.gates if (v := g.check_formats()) is not None]
        self.verdicts += formats
        if not formats:
            self.say(
                "note: the brokers' write format was not checked (no --bootstrap-server); the scan after the last "
                "broker says whether the cluster ends v2-only"
            )
        elif not all(v.go for v in formats):
            why = "\n".join(v.summary() for v in formats if not v.go)
            return f"refusing the rolling run, nothing was stopped: not every broker writes v2.\n{why}"
        problems = self._refusals(self.settings.brokers)
        if problems:
            return "refusing the rolling run, nothing was stopped: " + problems
        return ""

    def _refusals(self, brokers: Sequence[int]) -> str:
        """What would refuse the plans of ``brokers`` after their stop and can be told while they run."""
        calls = [StageCall((self.workers[b].log_dirs,), host=self.workers[b].worker) for b in brokers]
        lines = []
        for b, r in zip(brokers, self.engine.map(Stage.SURVEY, cut_over_refusals, calls)):
            if not r.ok:
                lines.append(f"broker {b}: its worker could not look at its log dirs: {r.error}")
            lines += [f"broker {b}: {p.message} {p.advice}" for p in (r.value if r.ok else ())]
        return "\n  ".join(["", *lines]) if lines else ""

    def _scan_every_broker(self) -> tuple[LegacyLeft, ...]:
        """Every broker's log dirs, through its worker, after the last cut-over: what legacy data is left."""
        found = sorted(self.workers.items())
        calls = [StageCall((w.log_dirs, w.worker), host=w.worker) for _, w in found]
        scanned = []
        for (b, w), r in zip(found, self.engine.map(Stage.SURVEY, legacy_left, calls)):
            scanned.append(r.value if r.ok else LegacyLeft(w.worker, (), (f"broker {b}: scan failed: {r.error}",)))
        return tuple(scanned)

    # --- one broker -------------------------------------------------------------------------------------------

    def cut_over(self, broker: int, worker: WorkerBroker, rest: tuple[int, ...]) -> BrokerCutover:
        """One broker's cut-over: its steps in order (``_STEPS``), each passed or the first failed with what to do
        next; nothing after a failed step runs."""
        one = _OneBroker(
            broker,
            worker,
            self.settings.run_dir / f"broker-{broker}.plan.json",
            self._resume(rest),
            self._resume(rest[1:]) if len(rest) > 1 else "nothing: it was the last broker",
        )
        steps: list[StepRecord] = []
        for step, run in _STEPS:
            started = self.clock()
            outcome = run(self, one)
            seconds = round(self.clock() - started, 3)
            steps.append(StepRecord(step, outcome.ok, seconds, outcome.detail))
            if not outcome.ok:
                text = f"broker {broker}: {step.value} failed: {outcome.detail}\nNext: {outcome.what_next}"
                plan = str(one.plan_path) if one.plan_path.exists() else ""
                return BrokerCutover(broker, False, tuple(steps), plan, text)
            detail = f": {outcome.detail}" if outcome.detail else ""
            self.say(f"broker {broker}: {step.value} ok ({human_seconds(seconds)}){detail}")
        return BrokerCutover(broker, True, tuple(steps), str(one.plan_path))

    def _gate_step(self, one: _OneBroker, failed: str, what_next: str) -> _StepOutcome:
        """The gate asked until it opens or its timeout passes; ``failed``: the first line if it does not."""
        verdicts = self._gate(one.broker)
        if all(v.go for v in verdicts):
            return _StepOutcome(True)
        why = "\n".join(v.summary() for v in verdicts if not v.go)
        return _StepOutcome(False, f"{failed}\n{why}", what_next)

    def _gate_before(self, one: _OneBroker) -> _StepOutcome:
        timeout = self.settings.gate_timeout_s
        return self._gate_step(
            one,
            f"the gate did not open within {timeout:g} s; nothing was stopped.",
            f"once the reasons above are gone, run again: {one.resume}",
        )

    def _refusals_step(self, one: _OneBroker) -> _StepOutcome:
        refusals = self._refusals([one.broker])
        if not refusals:
            return _StepOutcome(True)
        return _StepOutcome(
            False,
            f"its plan would be refused after the stop; nothing was stopped:{refusals}",
            f"fix what is named above, then run again: {one.resume}",
        )

    def _stop_step(self, one: _OneBroker) -> _StepOutcome:
        s, broker = self.settings, one.broker
        code, out = run_operator_command(s.stop_command, broker, s.command_timeout_s)
        if code == 0:
            return _StepOutcome(True, out.strip().splitlines()[-1] if out.strip() else "")
        ran, how = self._how_it_failed(s.stop_command, broker, code)
        return _StepOutcome(
            False,
            f"the stop command `{ran}` {how}; whether broker {broker} is down is not known. Its output:\n{out}",
            f"check broker {broker}. If it still runs, nothing was changed: run again: {one.resume}. If it stopped, "
            f"start it (`{for_broker(s.start_command, broker)}`), wait for it to catch up, then run again.",
        )

    def _release_step(self, one: _OneBroker) -> _StepOutcome:
        release = self._wait_for_release(one.broker, one.worker)
        if release and all(d.released for d in release):  # a survey that saw no log dir proves nothing
            return _StepOutcome(True, f"{len(release)} log dir(s) released with a clean-shutdown marker")
        return _StepOutcome(
            False,
            self._release_problem(one.broker, release),
            f"nothing was converted. Find out why broker {one.broker} did not stop cleanly; start it "
            f"(`{for_broker(self.settings.start_command, one.broker)}`) so that Kafka recovers its log, wait for it to "
            f"catch up, then run again: {one.resume}",
        )

    def _plan_step(self, one: _OneBroker) -> _StepOutcome:
        try:
            one.plan = self._plan(one.broker, one.worker)
        except MigrateError as exc:
            return _StepOutcome(
                False,
                f"{exc}",
                f"nothing was converted; broker {one.broker} is stopped. Fix the cause, or start it again "
                f"(`{for_broker(self.settings.start_command, one.broker)}`); then run again: {one.resume}",
            )
        write_plan(one.plan, one.plan_path)
        e = one.plan.estimates
        return _StepOutcome(True, f"{e.partitions} partitions, {e.segments} segments")

    def _execute_step(self, one: _OneBroker) -> _StepOutcome:
        s, broker, plan, plan_path = self.settings, one.broker, one.plan, one.plan_path
        if not plan.estimates.partitions:
            return _StepOutcome(True, "no legacy segments: nothing to convert")
        report = pipeline.execute(plan, self.engine, require_consistent_replicas=s.require_consistent_replicas)
        scheduler = f"--scheduler {self.engine.address}"
        if not report.ok:
            problems = [e.message for e in report.errors] + [
                f"{p.partition}: {p.problem.message if p.problem else p.state.value}" for p in report.unmigrated
            ]
            return _StepOutcome(
                False,
                f"execute of {plan_path} did not migrate every partition; broker {broker} stays stopped:\n  "
                + "\n  ".join(problems[:20]),
                f"finish it with `kafka-log-migrate execute --plan {plan_path} {scheduler} --tls-dir ...`, or "
                f"put every original back with `kafka-log-migrate rollback --plan {plan_path} {scheduler} "
                f"--tls-dir ...`; then start broker {broker} (`{for_broker(s.start_command, broker)}`), wait for "
                f"the gate, and continue with: {one.after}",
            )
        c = report.cutover
        detail = (
            f"{c.window_segments} segments converted and verified in the window, {c.staged_segments} taken from "
            "pre-staging"
            if c is not None
            else f"{report.totals.verified} segments converted and verified"
        )
        detail += "".join(f"; warning: replicas of {d.partition} differ" for d in report.divergent_replicas)
        compared, differences = self._against_peers_staging(broker, plan)
        detail += f"; {compared} converted segments compared with the running peers' pre-staged ones"
        diverged = [d for d in differences if d.kind == DifferenceKind.RECORDS]
        detail += "".join(f"; warning: {_difference_text(d)}" for d in differences)
        if diverged and s.require_consistent_replicas:
            return _StepOutcome(
                False,
                f"broker {broker}'s converted segments hold other records than its peers staged: "
                + "; ".join(_difference_text(d) for d in diverged[:10]),
                f"broker {broker} stays stopped. Find the right copy; to put broker {broker}'s originals back: "
                f"`kafka-log-migrate rollback --plan {plan_path} {scheduler} --tls-dir ...`, then start it; "
                f"continue with: {one.after}",
            )
        return _StepOutcome(True, detail)

    def _start_step(self, one: _OneBroker) -> _StepOutcome:
        s, broker = self.settings, one.broker
        code, out = run_operator_command(s.start_command, broker, s.command_timeout_s)
        if code == 0:
            return _StepOutcome(True)
        ran, how = self._how_it_failed(s.start_command, broker, code)
        return _StepOutcome(
            False,
            f"the start command `{ran}` {how}; broker {broker} is converted (plan {one.plan_path}). Output:\n{out}",
            f"start broker {broker} yourself and wait for it to catch up; then continue with: {one.after}",
        )

    def _gate_after(self, one: _OneBroker) -> _StepOutcome:
        timeout = self.settings.gate_timeout_s
        return self._gate_step(
            one,
            f"broker {one.broker} was started but the gate did not open again within {timeout:g} s:",
            f"watch broker {one.broker} (its log, under-replicated partitions); once the cluster is healthy, continue "
            f"with: {one.after}. To undo it: stop it, `kafka-log-migrate rollback --plan {one.plan_path} ...`, start "
            "it.",
        )

    def _against_peers_staging(self, broker: int, plan: Any) -> tuple[int, tuple[StagedDifference, ...]]:
        """This broker's cut-over (what it took from staging and what it converted in the window) against the digests
        its running peers' pre-stage passes recorded for the same offsets: (segments compared, differences)."""
        calls = [StageCall((d.key,), d.host, plan, d.key) for d in plan.log_dirs]
        mine = [x for r in self.engine.map(Stage.REPLICA_DIGESTS, converted_digests, calls) if r.ok for x in r.value]
        partitions = sorted({d.partition for d in mine})
        peers = [(b, w, log_dir) for b, w in self.workers.items() if b != broker for log_dir in w.log_dirs]
        calls = [StageCall((log_dir, partitions), host=w.worker) for _, w, log_dir in peers]
        by_broker: dict[int, list[StagedDigest]] = {broker: mine}
        for (b, _, _), r in zip(peers, self.engine.map(Stage.REPLICA_DIGESTS, peer_staged_digests, calls)):
            if r.ok:
                by_broker.setdefault(b, []).extend(r.value)
        check = compare_staged(by_broker)
        peer_spans = {_span(p) for b, ps in by_broker.items() if b != broker for p in ps}
        compared = sum(1 for d in mine if _span(d) in peer_spans)
        return compared, differences_with(broker, check)

    def _how_it_failed(self, command: str, broker: int, code: int | None) -> tuple[str, str]:
        """An operator command that failed: the command as it ran, and how it failed."""
        how = f"exited {code}" if code is not None else f"did not finish within {self.settings.command_timeout_s:g} s"
        return for_broker(command, broker), how

    def _gate(self, broker: int) -> list[GateVerdict]:
        def show(v: GateVerdict) -> None:
            self.verdicts.append(v)
            if not v.go:
                self.say(v.summary())

        s = self.settings
        return wait_for_go(self.gates, broker, s.gate_timeout_s, s.gate_interval_s, on_verdict=show)

    def _wait_for_release(self, broker: int, worker: WorkerBroker) -> tuple[LogDirRelease, ...] | None:
        s = self.settings
        deadline = self.clock() + s.release_timeout_s
        state: tuple[LogDirRelease, ...] | None = None
        call = StageCall((worker.log_dirs,), host=worker.worker)
        while True:
            [r] = self.engine.map(Stage.SURVEY, release_state, [call])
            state = r.value if r.ok else None
            # Kafka writes the clean-shutdown marker before it lets go of the lock: once no process holds a log
            # dir's lock, its marker is there or never will be, and waiting longer shows nothing new
            if (state is not None and all(d.lock_holder is None for d in state)) or self.clock() > deadline:
                return state
            time.sleep(s.release_interval_s)

    def _release_problem(self, broker: int, state: tuple[LogDirRelease, ...] | None) -> str:
        timeout = self.settings.release_timeout_s
        if not state:
            return f"broker {broker}'s worker could not look at its log dirs"
        out = []
        for d in state:
            if d.lock_holder is not None:
                who = f"process {d.lock_holder}" if d.lock_holder else "a process (pid not visible)"
                out.append(f"{d.log_dir}: {who} still holds Kafka's .lock {timeout:g} s after the stop command")
            elif not d.clean_shutdown:
                out.append(
                    f"{d.log_dir}: the lock is released but there is no clean-shutdown marker (.kafka_cleanshutdown): "
                    "the broker did not stop cleanly (killed or crashed); Kafka will recover "
                    "this log at its next start, and a log that needs recovery is never converted"
                )
        return "; ".join(out)

    def _plan(self, broker: int, worker: WorkerBroker) -> Any:
        s = self.settings
        call = StageCall((s.request, s.broker_config, worker.worker), host=worker.worker)
        [r] = self.engine.map(Stage.SURVEY, survey_broker, [call])
        if not r.ok:
            raise MigrateError(f"the survey of broker {broker} on {worker.worker} failed: {r.error}")
        if r.value.broker_id != broker:
            raise MigrateError(f"worker {worker.worker} now serves broker {r.value.broker_id}, not {broker}")
        try:
            return merge([r.value], (broker,), self.engine.address)
        except ClusterPlanRefusedError as exc:
            raise MigrateError(str(exc)) from None

    def _resume(self, brokers: tuple[int, ...]) -> str:
        return f"the same rolling command with --brokers {','.join(map(str, brokers))}"


def _span(d: StagedDigest) -> tuple[str, int, int | None, int | None]:
    return d.partition, d.base_offset, d.first_offset, d.last_offset


def _difference_text(d: StagedDifference) -> str:
    groups = " vs ".join("+".join(map(str, g)) for g in d.groups)
    what = "hold different records" if d.kind == DifferenceKind.RECORDS else "carry different timestamps"
    return f"{d.partition} offsets {d.first_offset}..{d.last_offset}: brokers {groups} {what}"


@dataclass
class _OneBroker:
    """What the steps of one broker's cut-over share: who, where its plan goes, what to say next, and its plan once
    made."""

    broker: int
    worker: WorkerBroker
    plan_path: Path
    resume: str  # the command that runs this broker again
    after: str  # what to run once this broker is done
    plan: Any = None


@dataclass(frozen=True)
class _StepOutcome:
    ok: bool
    detail: str = ""
    what_next: str = ""


# one broker's cut-over, in order: the gate before anything is stopped, what can refuse it while it runs, the stop
# and Kafka's release of its log dirs, the plan and the conversion, the start and the gate again
_STEPS: tuple[tuple[Step, Callable[[RollingRun, _OneBroker], _StepOutcome]], ...] = (
    (Step.GATE, RollingRun._gate_before),
    (Step.REFUSALS, RollingRun._refusals_step),
    (Step.STOP, RollingRun._stop_step),
    (Step.RELEASE, RollingRun._release_step),
    (Step.PLAN, RollingRun._plan_step),
    (Step.EXECUTE, RollingRun._execute_step),
    (Step.START, RollingRun._start_step),
    (Step.GATE_AFTER, RollingRun._gate_after),
)
