"""The canary rehearsal (issue 10): fingerprint, plan --check, execute, verify, rollback, compare, on broker-shaped log
dirs built from Kafka-written fixtures; and the ways it must fail loudly while leaving the data as it found it.

Every run that executes or rolls back is also judged from outside the rehearsal: ``runs.snapshot`` (every file's
sha256 and mtime, every directory's mtime) before and after, and an independent ``scan`` that must see the target
format exactly while the rehearsal says the data is migrated and the original formats once it is rolled back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LEGACY_LOGDIR, ORACLE, REAL_BROKER, REPO, have_java
from kafka_layout import lock_held_by_other_process, make_broker_logdir
from runs import scan_partitions, snapshot

from migrate.cli import main
from migrate.engines import SerialEngine
from migrate.errors import MigrateError
from migrate.model.plan_tree import ConvertOptions
from migrate.planning.plan import load_plan
from migrate.rehearse import driver as rehearse
from migrate.rehearse.fingerprint import compare_fingerprints, fingerprint_tree
from migrate.rehearse.projection import parse_cluster_bytes
from migrate.rehearse.readers import judge_after
from migrate.rehearse.records import BrokerBytes, FingerprintChange, PartitionDigest, RehearsalConfig, RehearsalState
from migrate.rehearse.report import RehearsalPaths, load_state, slow_reader_advice
from migrate.reports.scan import scan_log_dirs
from migrate.run.faults import CRASH_ENV, CRASH_EXIT
from migrate.run.workspace import FENCE_NAME
from migrate.units import human_seconds, parse_data_bytes

LEGACY_PARTITIONS = sorted(p.name for p in LEGACY_LOGDIR.iterdir() if p.is_dir())
REAL_PARTITIONS = sorted(p.name for p in (REAL_BROKER / "logdir").iterdir() if p.is_dir())
ORACLE_ARG = str(ORACLE) if have_java() else "none"
ORACLE_READER = "Apache Kafka (oracle, kafka-clients FileRecords)"
STEPS = ["fingerprint", "plan-check", "baseline", "execute", "verify", "rollback", "compare"]


def serial() -> tuple[SerialEngine, str]:
    return SerialEngine(), "active"


def config(*log_dirs: Path, **kw) -> RehearsalConfig:
    kw.setdefault("options", ConvertOptions(truncate_tail=True))
    kw.setdefault("oracle", "" if ORACLE_ARG == "none" else ORACLE_ARG)
    return RehearsalConfig(log_dirs=tuple(str(d) for d in log_dirs), **kw)


def formats(log_dirs: list[Path]) -> dict[tuple[str, str], dict[int, int]]:
    """(log dir, partition dir) -> batches per magic, from an independent scan."""
    report = scan_log_dirs([str(d) for d in log_dirs])
    out = {}
    for d, p in report.partitions():
        assert d.error is None, d.error
        out[(d.log_dir, p.dir)] = p.batches_by_magic
    return out


def files_by_inode(root: Path) -> dict[str, tuple[int, str]]:
    return {
        str(p.relative_to(root)): (p.stat().st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def cli(*args: str) -> int:
    return main(["rehearse", "--engine", "serial", "--oracle", ORACLE_ARG, *args])


def step(report: dict, name: str) -> dict:
    return next(s for s in report["steps"] if s["name"] == name)


@pytest.fixture
def broker(tmp_path: Path) -> list[Path]:
    """One broker with two log dirs: every legacy fixture partition, and the four a real 0.8 broker wrote."""
    return [
        make_broker_logdir(tmp_path, partitions=LEGACY_PARTITIONS, name="kafka-logs"),
        make_broker_logdir(tmp_path, partitions=REAL_PARTITIONS, name="kafka-logs-2", source="real-broker"),
    ]


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return make_broker_logdir(tmp_path, partitions=["plain-v0-0", "gzip-v0-0", "lz4-v1-1", "already-v2-1"])


def test_rehearsal_of_every_fixture_passes_with_identical_fingerprints(broker, tmp_path):
    before = [snapshot(d) for d in broker]
    formats_before = formats(broker)
    paths = RehearsalPaths.beside(tmp_path / "out" / "rehearsal.json")  # start() makes out/
    seen_migrated = {}

    def check_while_migrated(name: str, state: RehearsalState) -> None:
        if name != "verify":
            return
        plan = load_plan(paths.plan)
        planned = {(d.log_dir, p.name) for d in plan.log_dirs for p in d.partitions}
        for key, entry in scan_partitions(plan).items():
            if key in planned:  # the independent scan sees v2 only where the rehearsal migrated
                assert set(entry.batches_by_magic) == {2}, key
            else:
                assert entry.batches_by_magic == formats_before[key], key
        seen_migrated["partitions"] = len(planned)
        assert not any((d / FENCE_NAME).exists() for d in broker)

    cluster = parse_cluster_bytes("1:120G,2:118G,3:1.5Ti")
    report = rehearse.start(config(*broker, cluster=cluster), paths, serial, after_step=check_while_migrated)

    assert report.ok, report.verdict
    assert report.first_failing_step is None
    assert [(s.name, s.status.value) for s in report.steps] == [(s, "passed") for s in STEPS]
    # 17 legacy partitions with v0/v1 data (the torn tails dropped by --truncate-tail) and the 4 real-broker ones
    assert report.plan is not None and report.plan.partitions == 21 == seen_migrated["partitions"]
    assert report.execute is not None and report.execute.totals.verified == report.plan.segments
    assert report.growth is not None and report.growth.bytes_out > report.growth.bytes_in == report.plan.bytes
    assert report.refusals == ()
    # every reader looked at every partition dir, before and after
    readers = {(v.reader.split(" ")[0], v.stage): v for v in report.readers}
    assert readers[("kafka-log-migrate", "verify")].ok and readers[("scan", "verify")].ok
    assert readers[("kafka-python", "baseline")].partitions == readers[("kafka-python", "verify")].partitions == 24
    assert readers[("kafka-python", "verify")].ok and readers[("kafka-python", "verify")].problems == ()
    oracle = readers[("Apache", "verify")]
    if have_java():
        assert oracle.available and oracle.ok and oracle.partitions == 24, oracle
        assert report.oracle.startswith("verify: OK")
    else:
        assert not oracle.available and "java" in oracle.detail and "not available" in report.oracle
    # the fingerprints covered the broker's own files, and came back identical
    state = load_state(paths.state)
    covered = {e.path for e in state.target_before[str(broker[0])].entries}
    assert {".kafka_cleanshutdown", "meta.properties", "recovery-point-offset-checkpoint"} <= covered
    assert {"plain-v0-0/partition.metadata", "plain-v0-0/leader-epoch-checkpoint"} <= covered
    assert [c.identical for c in report.fingerprints] == [True, True]
    assert [c.entries_after for c in report.fingerprints] == [len(state.target_before[str(d)].entries) for d in broker]
    # judged from outside: every byte, mtime and format as before
    assert [snapshot(d) for d in broker] == before
    assert formats(broker) == formats_before
    assert not paths.lock.exists()
    # the projection: each broker's window is its bytes over the canary's measured rates, steps one after another
    p = report.projection
    assert p is not None and p.window_steps == ("plan-check", "execute", "verify")
    rates = {r.step: r.bytes_per_second for r in p.rates}
    assert set(rates) == {"plan-check", "execute", "verify", "rollback"} and all(rates.values())
    windows = {b.broker: b for b in p.brokers}
    assert windows["3"].bytes == int(1.5 * 2**40)
    for b in cluster:
        expected = {s: b.bytes / rates[s] for s in p.window_steps}
        assert windows[b.broker].seconds_by_step == pytest.approx(expected, rel=1e-3)
        assert windows[b.broker].window_seconds == pytest.approx(sum(expected.values()), rel=1e-3)
    assert p.cluster_parallel_seconds == max(windows[b.broker].window_seconds for b in cluster)
    assert p.cluster_serial_seconds == pytest.approx(sum(windows[b.broker].window_seconds for b in cluster))
    # after pre-staging only what changed since the last pass is planned and converted in the window
    for b in cluster:
        w = windows[b.broker]
        scaled = 0.01 * (w.seconds_by_step["plan-check"] + w.seconds_by_step["execute"])
        assert w.cutover_seconds == pytest.approx(scaled + w.seconds_by_step["verify"], rel=1e-3)
    assert p.cluster_rolling_cutover_seconds == pytest.approx(sum(windows[b.broker].cutover_seconds for b in cluster))
    # the JSON report on disk is the same report
    on_disk = json.loads(paths.report.read_text())
    assert on_disk["ok"] is True and on_disk["id"] == report.id
    # and its HTML rendering beside it: the verdict, every step and the cluster window
    page = Path(on_disk["html_report"]).read_text()
    assert 'class="ok" id="verdict"' in page and report.verdict in page
    assert all(f"<td>{s.name}</td>" in page for s in report.steps)
    assert 'id="cluster-window"' in page
    # the pre-staged cut-over the terminal shows, per broker and rolling over the cluster
    assert "<th>pre-staged cut-over</th>" in page or ">pre-staged cut-over<" in page, page
    for b in cluster:
        assert f"<td>{human_seconds(windows[b.broker].cutover_seconds)}</td>" in page
    assert f'id="rolling-cutover">{human_seconds(p.cluster_rolling_cutover_seconds)}<' in page
    # an independent reader far slower than execute is named, with the option that leaves it out
    execute_seconds = state.step("execute").seconds
    slow = [
        dataclasses.replace(r, seconds=20 * execute_seconds) if r.reader.startswith("kafka-python") else r
        for r in state.readers
    ]
    advice = slow_reader_advice(dataclasses.replace(state, readers=tuple(slow)))
    assert "`--independent-reader none`" in advice and "40 times execute's" in advice, advice
    fast = [
        dataclasses.replace(r, seconds=execute_seconds) if r.reader.startswith("kafka-python") else r
        for r in state.readers
    ]
    assert slow_reader_advice(dataclasses.replace(state, readers=tuple(fast))) == ""


def test_on_copy_leaves_every_original_inode_and_byte_alone(small, tmp_path):
    before = files_by_inode(small)
    canary_snapshot = snapshot(small)
    copy_dir = tmp_path / "rehearsal-copy"
    probe = tmp_path / "probe"
    probe.write_bytes(b"x")
    try:
        os.link(probe, tmp_path / "probe-link")
        can_link = True
    except OSError:
        can_link = False
    paths = RehearsalPaths.beside(tmp_path / "rehearsal.json")
    swapped = []

    def canary_untouched(name: str, state: RehearsalState) -> None:
        assert files_by_inode(small) == before, f"the canary changed during {name}"
        if name == "execute":  # the copy's live segments were swapped; the canary's names still lead to the originals
            copy = Path(state.targets[0])
            for rel, (inode, _) in before.items():
                if rel.endswith(".log") and (copy / rel).stat().st_ino != inode:
                    swapped.append(rel)

    report = rehearse.start(config(small, on_copy=str(copy_dir)), paths, serial, after_step=canary_untouched)

    assert report.ok, report.verdict
    assert [s.name for s in report.steps] == ["fingerprint", "copy", *STEPS[1:]]
    assert report.rehearsed_on == (str(copy_dir / small.name),)
    copied = report.copy.log_dirs[0]
    segments = sum(1 for rel in before if rel.endswith(".log"))
    if can_link:
        assert copied.segment_methods == {"hardlink": segments}
    else:  # a filesystem without hard links: reflinks or plain copies, never a shared inode
        assert sum(copied.segment_methods.values()) == segments and "hardlink" not in copied.segment_methods
    assert copied.other_methods == {"copy": len(before) - segments}
    assert report.copy.method.startswith("segment files: hard links" if can_link else "segment files: ")
    assert report.copy.method.endswith(f"the broker's other files: plain copies ({len(before) - segments})")
    assert all(f.identical for f in report.copy.fidelity)
    # the legacy segments of every planned partition were swapped in the copy, never in the canary
    plan = load_plan(paths.plan)
    planned = {f"{p.name}/{s.file}" for d in plan.log_dirs for p in d.partitions for s in p.segments}
    assert set(swapped) == planned and planned
    # the small files a broker rewrites in place never share an inode with the canary's
    copy = copy_dir / small.name
    for rel in ("meta.properties", ".kafka_cleanshutdown", "plain-v0-0/leader-epoch-checkpoint"):
        assert (copy / rel).stat().st_ino != (small / rel).stat().st_ino
    assert files_by_inode(small) == before
    assert snapshot(small) == canary_snapshot
    assert [c.what for c in report.fingerprints] == ["rehearsed copy", "canary log dir (source of the copy)"]
    assert all(c.identical for c in report.fingerprints)
    assert snapshot(copy) == canary_snapshot  # the copy itself came back as it was copied
    assert formats([copy]) == {(str(copy), k[1]): v for k, v in formats([small]).items()}


def corrupt_second_message(log: Path) -> int:
    """Flip the last byte of the second legacy message of ``log``; returns the message's byte position."""
    data = bytearray(log.read_bytes())
    second = 12 + struct.unpack_from(">i", data, 8)[0]
    size = struct.unpack_from(">i", data, second + 8)[0]
    data[second + 12 + size - 1] ^= 0xFF
    mtime = log.stat().st_mtime_ns
    log.write_bytes(bytes(data))
    os.utime(log, ns=(mtime, mtime))
    return second


def test_a_corrupt_segment_is_refused_by_plan_check_and_nothing_is_executed(small, tmp_path, capsys):
    bad = small / "plain-v0-0" / "00000000000000000040.log"
    position = corrupt_second_message(bad)
    before = snapshot(small)
    out = tmp_path / "rehearsal.json"

    assert cli("--log-dirs", str(small), "-o", str(out)) == 1

    text = capsys.readouterr().out
    assert "FAILED at step plan-check" in text and f"at byte position {position}" in text
    report = json.loads(out.read_text())
    assert report["ok"] is False and report["first_failing_step"] == "plan-check"
    assert [(s["name"], s["status"]) for s in report["steps"]] == [
        ("fingerprint", "passed"),
        ("plan-check", "failed"),
        ("baseline", "skipped"),
        ("execute", "skipped"),
        ("verify", "skipped"),
        ("rollback", "skipped"),
        ("compare", "passed"),
    ]
    [refusal] = report["refusals"]
    assert (refusal["step"], refusal["file"], refusal["position"]) == ("plan-check", str(bad), position)
    assert "CRC" in refusal["message"]
    assert step(report, "rollback")["message"] == "not needed: nothing was executed"
    assert not Path(report["plan_path"]).exists() and report["execute"] is None
    assert all(c["identical"] for c in report["fingerprints"])
    assert "left as it was found" in report["next_steps"]
    assert snapshot(small) == before


def test_a_live_file_changed_before_rollback_is_refused_until_forced(small, tmp_path):
    before = snapshot(small)
    formats_before = formats([small])
    paths = RehearsalPaths.beside(tmp_path / "rehearsal.json")
    changed = {}

    def broker_writes(name: str, state: RehearsalState) -> None:
        if name == "verify":  # as a broker started on the migrated data would: an append to a live segment
            part = load_plan(paths.plan).log_dirs[0].partitions[0]
            live = Path(part.dir) / part.segments[-1].file
            with open(live, "ab") as f:
                f.write(b"\0" * 7)
            changed["file"] = str(live)

    report = rehearse.start(config(small), paths, serial, after_step=broker_writes)

    assert not report.ok and report.first_failing_step == "rollback"
    assert report.verdict.startswith("FAILED at step rollback: rollback refused: 1 live file(s) changed")
    assert "NOT back" in report.next_steps and "--force" in report.next_steps
    status = {s.name: s.status.value for s in report.steps}
    assert status == dict.fromkeys(STEPS, "passed") | {"rollback": "failed", "compare": "failed"}
    [refusal] = report.refusals
    assert (refusal.step, refusal.file) == ("rollback", changed["file"])
    assert report.rollback is not None and report.rollback.refused and not report.rollback.rollbacks
    # nothing was put back: the independent scan still sees the migrated data, and the compare step says so
    plan = load_plan(paths.plan)
    assert all(
        set(f) == {2} for k, f in formats([small]).items() if k[1] in {p.name for p in plan.log_dirs[0].partitions}
    )
    assert not report.fingerprints[0].identical
    # without --force the rollback refuses again; a new rehearsal refuses to start over an unfinished one
    again = rehearse.resume(paths, serial)
    assert (
        again.first_failing_step == "rollback"
        and step(json.loads(paths.report.read_text()), "rollback")["attempts"] == 2
    )
    with pytest.raises(MigrateError, match="unfinished rehearsal"):
        rehearse.start(config(small), paths, serial)
    forced = rehearse.resume(paths, serial, force=True)
    assert forced.ok, forced.verdict
    assert "forced over changed live files" in step(json.loads(paths.report.read_text()), "rollback")["message"]
    assert any("rollback failed last time: trying it again with --force" in e for e in forced.events)
    assert snapshot(small) == before
    assert formats([small]) == formats_before


def test_a_held_lock_fails_the_rehearsal_and_changes_nothing(small, tmp_path, capsys):
    out = tmp_path / "rehearsal.json"
    copy_dir = tmp_path / "copy"
    with lock_held_by_other_process(small) as holder:
        before = snapshot(small)
        assert cli("--log-dirs", str(small), "-o", str(out)) == 1
        in_place = json.loads(out.read_text())
        assert cli("--log-dirs", str(small), "--on-copy", str(copy_dir), "-o", str(tmp_path / "copy.json")) == 1
        on_copy = json.loads((tmp_path / "copy.json").read_text())
        assert snapshot(small) == before
    capsys.readouterr()
    assert in_place["first_failing_step"] == "plan-check"
    assert f"process {holder.pid} holds the fcntl lock" in step(in_place, "plan-check")["message"]
    assert step(in_place, "execute")["status"] == "skipped" and all(c["identical"] for c in in_place["fingerprints"])
    # a copy of a running broker would share the segments it appends to: refused before anything is copied
    assert on_copy["first_failing_step"] == "copy"
    assert f".lock is held by process {holder.pid}" in step(on_copy, "copy")["message"]
    assert [s["status"] for s in on_copy["steps"]] == ["passed", "failed", *["skipped"] * 6]
    assert not copy_dir.exists() or not any(copy_dir.iterdir())


def test_a_rehearsal_plans_as_plan_does_ranges_and_digest_included(small, tmp_path, capsys):
    out = tmp_path / "rehearsal.json"
    before = snapshot(small)
    assert cli("--log-dirs", str(small), "-o", str(out), "--range-bytes", "3000", "--digest", "sha256") == 0
    capsys.readouterr()
    plan = load_plan(RehearsalPaths.beside(out).plan)
    assert plan.options.digest.value == "sha256"
    assert sum(t.byte_range is not None for t in plan.tasks) >= 3
    assert json.loads(out.read_text())["ok"] is True and snapshot(small) == before


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "migrate.cli", "rehearse", "--engine", "serial", "--oracle", ORACLE_ARG, *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("point", ["commit:swap-begun", "after:exchange", "commit:rollback-begun"])
def test_a_rehearsal_killed_mid_step_is_finished_by_resume(small, tmp_path, point):
    before = snapshot(small)
    formats_before = formats([small])
    out = tmp_path / "rehearsal.json"

    killed = run_cli("--log-dirs", str(small), "-o", str(out), env={CRASH_ENV: point})

    assert killed.returncode == CRASH_EXIT, killed.stderr[-2000:]
    running = "rollback" if "rollback" in point else "execute"
    # piped, the operator still sees each step as it starts and ends, not a minute of silence
    assert f"rehearse: step {running} started" in killed.stderr
    assert "rehearse: step fingerprint passed in" in killed.stderr
    report = json.loads(out.read_text())
    assert report["verdict"] == f"INCOMPLETE: step {running} was running when the process ended"
    assert "rehearse --resume" in report["next_steps"] and "rollback --plan" in report["next_steps"]
    assert step(report, running)["status"] == "running"
    if point == "commit:swap-begun":  # mid-swap: the fence keeps a broker out until the run is finished
        assert (small / FENCE_NAME).is_dir()
    started_again = run_cli("--log-dirs", str(small), "-o", str(out))
    assert started_again.returncode == 1 and "unfinished rehearsal" in started_again.stderr

    resumed = run_cli("--resume", "-o", str(out), "--json")

    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    report = json.loads(resumed.stdout)
    assert report["ok"] and report["verdict"].startswith("PASSED")
    assert step(report, running)["attempts"] == 2
    assert all(s["status"] == "passed" for s in report["steps"])
    assert any(f"step {running} was running when the process ended" in e for e in report["events"])
    if running == "execute":
        assert any("execute was interrupted and resumed" in c for c in report["projection"]["caveats"])
    assert all(c["identical"] for c in report["fingerprints"])
    assert snapshot(small) == before
    assert formats([small]) == formats_before


def test_a_copy_cut_short_by_a_crash_is_made_again_on_resume(small, tmp_path):
    before = files_by_inode(small)
    copy_dir = tmp_path / "copy"
    out = tmp_path / "rehearsal.json"

    killed = run_cli(
        "--log-dirs", str(small), "--on-copy", str(copy_dir), "-o", str(out), env={CRASH_ENV: "rehearse:copy-file:9"}
    )

    assert killed.returncode == CRASH_EXIT, killed.stderr[-2000:]
    copied = [p for p in (copy_dir / small.name).rglob("*") if p.is_file()]
    assert 0 < len(copied) < len(before)  # cut short
    resumed = run_cli("--resume", "-o", str(out), "--json")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    report = json.loads(resumed.stdout)
    assert step(report, "copy")["attempts"] == 2 and all(f["identical"] for f in report["copy"]["fidelity"])
    assert all(c["identical"] for c in report["fingerprints"])
    assert files_by_inode(small) == before
    assert files_by_inode(copy_dir / small.name).keys() == before.keys()


def test_a_rehearsal_killed_mid_execute_can_be_rolled_back_by_hand(small, tmp_path):
    before = snapshot(small)
    formats_before = formats([small])
    out = tmp_path / "rehearsal.json"
    assert (
        run_cli("--log-dirs", str(small), "-o", str(out), env={CRASH_ENV: "commit:swap-begun"}).returncode == CRASH_EXIT
    )
    plan = json.loads(out.read_text())["plan_path"]

    assert main(["rollback", "--plan", plan]) == 0

    assert snapshot(small) == before
    assert formats([small]) == formats_before


class CtrlCAtSwap(SerialEngine):
    def map(self, stage, fn, calls, fold=None):
        if stage == "swap":
            raise KeyboardInterrupt
        return super().map(stage, fn, calls, fold)


def test_ctrl_c_mid_execute_is_recorded_and_resume_finishes(small, tmp_path):
    before = snapshot(small)
    paths = RehearsalPaths.beside(tmp_path / "rehearsal.json")

    with pytest.raises(KeyboardInterrupt):
        rehearse.start(config(small), paths, lambda: (CtrlCAtSwap(), "active"))

    report = json.loads(paths.report.read_text())
    assert report["verdict"] == "INCOMPLETE: step execute was interrupted (Ctrl-C)"
    assert step(report, "execute")["status"] == "interrupted" and not paths.lock.exists()
    finished = rehearse.resume(paths, serial)
    assert finished.ok, finished.verdict
    assert any("interrupted by Ctrl-C: resuming it" in e for e in finished.events)
    assert snapshot(small) == before


def test_resume_of_a_finished_rehearsal_only_reports_it(small, tmp_path):
    paths = RehearsalPaths.beside(tmp_path / "rehearsal.json")
    first = rehearse.start(config(small, oracle="", independent_reader="none"), paths, serial)
    assert first.ok
    assert {v.reader: v.detail for v in first.readers if not v.available} == {
        ORACLE_READER: "not available: no oracle given (--oracle none)",
        "kafka-python": "not available: --independent-reader none",
    }
    again = rehearse.resume(paths, serial)
    assert again.ok and again.steps == first.steps and again.id == first.id


def test_the_report_and_state_never_go_inside_a_log_dir(small, tmp_path):
    before = snapshot(small)
    with pytest.raises(MigrateError, match="inside the log dir"):
        rehearse.start(config(small), RehearsalPaths.beside(small / "rehearsal.json"), serial)
    with pytest.raises(MigrateError, match="contain one another"):
        rehearse.start(config(small, on_copy=str(small / "copy")), RehearsalPaths.beside(tmp_path / "r"), serial)
    assert snapshot(small) == before


def test_fingerprints_see_mtime_and_inode_changes_that_keep_the_bytes(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    (root / "a.log").write_bytes(b"abc")
    (root / "b.log").write_bytes(b"xyz")
    first = fingerprint_tree(root)
    st = (root / "a.log").stat()
    os.utime(root / "a.log", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    (root / "b.tmp").write_bytes(b"xyz")
    os.utime(root / "b.tmp", ns=((root / "b.log").stat().st_atime_ns, (root / "b.log").stat().st_mtime_ns))
    os.replace(root / "b.tmp", root / "b.log")
    os.utime(root, ns=(root.stat().st_atime_ns, first.entries[0].mtime_ns))
    second = fingerprint_tree(root)
    diff = compare_fingerprints("test", first, second)
    assert not diff.identical
    assert sorted((c.path, c.change) for c in diff.changes) == [("a.log", "mtime"), ("b.log", "inode")]
    assert compare_fingerprints("test", first, second, inodes=False).changes == (
        FingerprintChange("a.log", "mtime", str(st.st_mtime_ns), str(st.st_mtime_ns + 1)),
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("123456789", 123456789), ("120G", 120 * 10**9), ("1.5T", 1.5 * 10**12), ("800GiB", 800 * 2**30), ("4Ki", 4096)],
)
def test_byte_counts_as_operators_write_them(text, expected):
    assert parse_data_bytes(text) == int(expected)


def test_cluster_bytes_are_refused_when_malformed():
    assert parse_cluster_bytes("1:1G, 2:2G") == (
        BrokerBytes("1", 10**9),
        BrokerBytes("2", 2 * 10**9),
    )
    for bad in ("1:1G,1:2G", "120G", "1:lots"):
        with pytest.raises(ValueError):
            parse_cluster_bytes(bad)
    assert main(["rehearse", "--log-dirs", "/nonexistent", "--broker-bytes", "1G"]) == 2


def test_a_failed_verify_is_still_rolled_back_and_the_data_left_as_found(small, tmp_path):
    before = snapshot(small)
    paths = RehearsalPaths.beside(tmp_path / "rehearsal.json")
    target = str(small / "gzip-v0-0")

    def misremember(name: str, state: RehearsalState) -> None:
        if name == "baseline":  # as if kafka-python had read other records from the originals than it reads now
            d = state.baseline_independent[target]
            state.baseline_independent = state.baseline_independent | {target: dataclasses.replace(d, sha256="0" * 64)}

    report = rehearse.start(config(small, oracle=""), paths, serial, after_step=misremember)

    assert not report.ok and report.first_failing_step == "verify"
    assert f"{target}: kafka-python" in report.verdict and "reads different records after execute" in report.verdict
    assert {s.name: s.status.value for s in report.steps} == dict.fromkeys(STEPS, "passed") | {"verify": "failed"}
    assert "left as it was found" in report.next_steps
    assert snapshot(small) == before


def digest(path: str, sha: str, ts: str, magics: dict[str, int], valid: bool = True) -> PartitionDigest:
    return PartitionDigest(path, 3, sha, ts, magics, valid)


def test_a_reader_judges_records_formats_timestamps_and_untouched_partitions():
    before = {
        "/l/v1-0": digest("/l/v1-0", "s1", "t1", {"1": 2}),
        "/l/v0-0": digest("/l/v0-0", "s2", "t2", {"0": 2}),
        "/l/other-0": digest("/l/other-0", "s3", "t3", {"2": 1}),
        "/l/gone-0": digest("/l/gone-0", "s4", "t4", {"1": 1}),
    }
    after = {
        "/l/v1-0": digest("/l/v1-0", "s1", "t1-changed", {"1": 1, "2": 1}),
        "/l/v0-0": digest("/l/v0-0", "s2", "t2-mtime", {"2": 2}),  # v0 gets LogAppendTime = mtime: new timestamps
        "/l/other-0": digest("/l/other-0", "s3", "t3", {"2": 1}, valid=False),
    }
    planned = {"/l/v1-0", "/l/v0-0", "/l/gone-0"}
    found = judge_after("R", before, after, planned, ConvertOptions())
    assert found == [
        "/l/gone-0: R could not read it after execute",
        "/l/other-0: was not planned, yet R judges it differently after execute",
        "/l/v1-0: R reads different timestamps after execute",
        "/l/v1-0: R still sees message format(s) v1 after execute",
    ]
    # with --timestamps none v0 records keep timestamp -1, so their sha256_ts must not change either
    none = ConvertOptions(timestamps="none")
    assert "/l/v0-0: R reads different timestamps after execute" in judge_after("R", before, after, planned, none)


def test_on_copy_holds_a_symlinked_partition_dir_as_a_real_one(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "lz4-v1-1"])
    elsewhere = tmp_path / "other-disk"
    elsewhere.mkdir()
    (log_dir / "lz4-v1-1").rename(elsewhere / "lz4-v1-1")
    (log_dir / "lz4-v1-1").symlink_to(elsewhere / "lz4-v1-1")
    canary = files_by_inode(elsewhere), snapshot(log_dir)
    paths = RehearsalPaths.beside(tmp_path / "rehearsal.json")

    report = rehearse.start(config(log_dir, on_copy=str(tmp_path / "copy")), paths, serial)

    assert report.ok, report.verdict
    assert report.copy.log_dirs[0].dereferenced_symlinks == ("lz4-v1-1",)
    copy = tmp_path / "copy" / log_dir.name
    assert (copy / "lz4-v1-1").is_dir() and not (copy / "lz4-v1-1").is_symlink()
    assert report.plan.partitions == 2  # the copy's own lz4-v1-1 was migrated, not the canary's other disk
    assert (files_by_inode(elsewhere), snapshot(log_dir)) == canary
