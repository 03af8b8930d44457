"""The maintenance window projected from the canary: the measured throughput of each window step (plan --check,
execute, verify) applied to every broker's bytes, with the caveats that say how far to trust it."""

from __future__ import annotations

from migrate.rehearse.records import BrokerBytes, BrokerWindow, Projection, RehearsalState, StepRate, StepStatus
from migrate.units import human_bytes, human_seconds, parse_data_bytes

SMALL_REHEARSAL_BYTES = 1 << 30


def parse_cluster_bytes(text: str) -> tuple[BrokerBytes, ...]:
    """``1:120G,2:118G``: each broker's bytes to migrate (``scan --json`` prints them as summary.legacyBytes)."""
    out = []
    for item in text.split(","):
        broker, sep, size = item.strip().partition(":")
        if not sep or not broker.strip():
            raise ValueError(f"{item!r}: expected BROKER:BYTES, e.g. 1:120G")
        out.append(BrokerBytes(broker.strip(), parse_data_bytes(size)))
    names = [b.broker for b in out]
    if len(set(names)) != len(names):
        raise ValueError(f"a broker is listed twice in {text!r}")
    return tuple(out)


WINDOW_STEPS = ("plan-check", "execute", "verify")
# a pre-staged cut-over converts only what changed after the last pass: its design point, an operator's pass run
# shortly before the stop leaves about this much
CUTOVER_CHANGED_FRACTION = 0.01
CUTOVER_SCALED_STEPS = ("plan-check", "execute")  # verify re-reads every migrated segment, staged or not


def project(state: RehearsalState) -> Projection | None:
    """From the canary's measured throughput to every broker's window: brokers in parallel take the slowest
    broker's window, one after the other the sum."""
    passed = [(rec := state.step(s)) is not None and rec.status == StepStatus.PASSED for s in WINDOW_STEPS]
    if state.plan is None or not all(passed):
        return None  # a window from steps that did not pass would be a guess presented as a measurement
    basis_bytes = state.plan.bytes
    rates: list[StepRate] = []
    caveats: list[str] = []
    for name in (*WINDOW_STEPS, "rollback"):
        rec = state.step(name)
        if rec is None or rec.status != StepStatus.PASSED:
            continue
        seconds = state.verify_seconds if name == "verify" else rec.seconds
        rate = basis_bytes / seconds if seconds > 0 and basis_bytes else None
        representative = rec.attempts == 1
        note = ""
        if not representative:
            note = f"{name} was interrupted and resumed: its time covers only the resumed part"
            caveats.append(f"{note}; rehearse again without interruption for a usable figure.")
        if name == "verify":
            note = "our verifier alone; the oracle and kafka-python are the rehearsal's extra checks"
        rates.append(StepRate(name, basis_bytes, round(seconds, 3), rate, representative, note))
    caveats.append(
        "Throughput is bytes of planned legacy segments per wall second on this broker with this engine; give each "
        "broker's legacy bytes (`kafka-log-migrate scan --json`, summary.legacyBytes) to --cluster-bytes."
    )
    caveats.append("Rollback (and the swap inside execute) scale with the number of files more than with bytes.")
    caveats.append(
        f"With pre-staging (`kafka-log-migrate prestage` while the broker runs, then plan + execute after its stop), "
        f"plan and execute cover only what changed after the last pass: projected at {CUTOVER_CHANGED_FRACTION:.0%} "
        "changed, with verify unchanged. The swap and the engine's start-up do not shrink with the data, so on small "
        "brokers that figure is a lower bound; `execute` reports the real window of each cut-over."
    )
    if basis_bytes < SMALL_REHEARSAL_BYTES:
        caveats.append(
            f"Measured on {human_bytes(basis_bytes)} only: fixed costs (engine start-up "
            f"{human_seconds(state.engine_start_seconds)}, per-step overheads) dominate, so larger brokers will run "
            "faster per byte than projected. Rehearse on a broker holding at least a few GB for a tight estimate."
        )
    by_step = {r.step: r for r in rates}
    brokers = []
    canary = BrokerBytes("canary (measured)", basis_bytes)
    for b in (canary, *state.config.cluster):
        step_rates = {s: by_step[s].bytes_per_second for s in WINDOW_STEPS if s in by_step}
        step_seconds = {s: round(b.bytes / rate, 3) for s, rate in step_rates.items() if rate}
        rollback = by_step.get("rollback")
        cutover = sum(
            step_seconds[s] * (CUTOVER_CHANGED_FRACTION if s in CUTOVER_SCALED_STEPS else 1.0) for s in step_seconds
        )
        brokers.append(
            BrokerWindow(
                broker=b.broker,
                bytes=b.bytes,
                seconds_by_step=step_seconds,
                window_seconds=round(sum(step_seconds.values()), 3),
                rollback_seconds=round(b.bytes / rollback.bytes_per_second, 3)
                if rollback and rollback.bytes_per_second
                else None,
                cutover_seconds=round(cutover, 3),
            )
        )
    cluster = brokers[1:]
    if not cluster:
        caveats.append("No cluster given: pass --cluster-bytes 1:120G,2:118G or --broker-bytes N --brokers K.")
    return Projection(
        basis=f"{human_bytes(basis_bytes)} of legacy segments on this broker ({state.engine or 'no'} engine)",
        window_steps=WINDOW_STEPS,
        rates=tuple(rates),
        brokers=tuple(brokers),
        cluster_parallel_seconds=max((b.window_seconds for b in cluster), default=None),
        cluster_serial_seconds=round(sum(b.window_seconds for b in cluster), 3) if cluster else None,
        caveats=tuple(caveats),
        cluster_rolling_cutover_seconds=round(sum(b.cutover_seconds or 0.0 for b in cluster), 3) if cluster else None,
        cutover_changed_fraction=CUTOVER_CHANGED_FRACTION,
    )
