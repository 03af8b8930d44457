"""The rolling cut-over on the cluster test's three brokers: real Dask workers in their own mount namespaces, each
"broker" a real process that holds its log dir's fcntl ``.lock`` and deletes the clean-shutdown marker while it
runs and writes the marker before letting go on SIGTERM, as Kafka does; the operator's stop, start and gate
commands are real shell scripts. Every broker pre-stages while it runs, and each cut-over takes what it staged. No
Kafka broker runs here: the Admin API gate is tested in test_rolling_gate.py."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_harness import BrokerCluster, can_unshare, make_tls
from conftest import needs_root_power, run_cli
from kafka_admin_stub import AdminCluster, KafkaAdminStub
from kafka_layout import make_broker_logdir
from runs import snapshot
from test_cluster import diverge

from migrate.cli import main
from migrate.planning.plan import load_plan
from migrate.rolling.broker_host import release_state

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("rolling_cluster")]
HOLDINGS = {
    1: ["plain-v0-0", "gzip-v0-0", "plain-v0-1"],
    2: ["plain-v0-0", "gzip-v0-0", "lz4-v1-1"],
    3: ["lz4-v1-1", "plain-v0-1"],
}

BROKER = """
import fcntl, os, signal, sys
log_dir, ready = sys.argv[1], sys.argv[2]
marker = os.path.join(log_dir, ".kafka_cleanshutdown")
lock = open(os.path.join(log_dir, ".lock"), "a")
fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
content = b""
if os.path.exists(marker):  # read, then deleted once the logs are loaded, as Kafka does
    content = open(marker, "rb").read()
    os.unlink(marker)

def stop(*_):
    with open(marker, "wb") as f:  # the clean stop writes the marker while still holding the lock
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    os._exit(0)  # and the lock goes with the process

signal.signal(signal.SIGTERM, stop)
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
while True:
    signal.pause()
"""


def scripts(root: Path, brokers: dict[int, Path]) -> dict[str, str]:
    """The operator's commands, each appending what it did to ``root/events``."""
    (root / "broker.py").write_text(BROKER)
    events = root / "events"
    case = "".join(f"  {b}) dir={d} ;;\n" for b, d in brokers.items())
    common = f'set -e\ncase "$1" in\n{case}esac\npid={root}/broker-$1.pid\n'
    files = {
        "start": common
        + f'echo "start $1" >> {events}\n'
        + f"{sys.executable} {root}/broker.py $dir $pid </dev/null >/dev/null 2>&1 &\n"
        + 'while [ ! -e $pid ]; do sleep 0.02; done\necho "broker $1 started"\n',
        "stop": common + f'echo "stop $1" >> {events}\nkill -TERM $(cat $pid) && rm $pid\necho "broker $1 stopping"\n',
        "kill9": common + f'echo "kill -9 $1" >> {events}\nkill -KILL $(cat $pid) && rm $pid\n',
        "gate": f'echo "gate $1" >> {events}\necho "cruise control: no anomaly for broker $1"\n',
    }
    out = {}
    for name, text in files.items():
        path = root / f"{name}.sh"
        path.write_text("#!/bin/sh\n" + text)
        path.chmod(0o755)
        out[name] = f"{path} {{broker}}"
    return out


def partitions(log_dir: Path, names: list[str]) -> dict[str, dict]:
    """The partition dirs' every file (content and mtime) and dir mtime: the data, without Kafka's own .lock and
    marker, which a broker's start and stop rewrite."""
    return {name: snapshot(log_dir / name) for name in names}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for this file's tests: each broker's worker sees its own root at one path (``data``), and each
    test makes its own log dirs under the roots."""
    if not can_unshare():
        needs_root_power("brokers at one path need mount namespaces (unshare -m)")
    base = tmp_path_factory.mktemp("rolling-cluster")
    tls = make_tls(base / "tls")
    roots = {b: base / f"b{b}" for b in HOLDINGS}
    for root in roots.values():
        root.mkdir()
    with BrokerCluster(tls, roots, base / "data") as c:
        yield c, roots, tls


@pytest.fixture
def running(cluster, tmp_path):
    """The brokers of a rolling run: log dirs ``rolling-logs``, each held by its running broker process."""
    c, roots, tls = cluster
    brokers = {
        b: make_broker_logdir(roots[b], parts, broker_id=b, name="rolling-logs") for b, parts in HOLDINGS.items()
    }
    commands = scripts(tmp_path, brokers)
    try:
        for b in brokers:
            subprocess.run(commands["start"].replace("{broker}", str(b)).split(), check=True, capture_output=True)
        (tmp_path / "events").write_text("")
        yield c, brokers, commands, tls
    finally:
        for pid_file in tmp_path.glob("broker-*.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        for d in brokers.values():  # the next test's brokers take the same path
            shutil.rmtree(d, ignore_errors=True)


def wait_stopped(log_dir: Path) -> None:
    """Until the broker process has let go of ``log_dir``: its marker written and its ``.lock`` released."""
    deadline = time.monotonic() + 30
    while not all(d.released for d in release_state((str(log_dir),))):
        assert time.monotonic() < deadline, f"the broker of {log_dir} did not stop"
        time.sleep(0.05)


def events(root: Path) -> list[str]:
    return (root / "events").read_text().splitlines()


def test_brokers_are_cut_over_one_by_one_behind_the_gate_and_one_rolls_back_byte_for_byte(running, tmp_path, capsys):
    c, brokers, commands, tls = running
    before = {b: partitions(d, HOLDINGS[b]) for b, d in brokers.items()}
    common = [
        "rolling",
        "--log-dirs",
        str(c.path_of(1) / "rolling-logs"),
        "--run-dir",
        str(tmp_path / "run"),
        "--gate-command",
        commands["gate"],
        "--gate-interval",
        "0.2",
        "--gate-timeout",
        "5",
        "--start-command",
        commands["start"],
        "--scheduler",
        c.address,
        "--tls-dir",
        str(tls),
        "--timestamps",
        "none",
    ]

    # every broker pre-stages while it runs (on its host; the same files its worker sees at the shared path)
    for d in brokers.values():
        ran = run_cli(capsys, "prestage", "--log-dirs", str(d), "--timestamps", "none")
        assert ran.code == 0 and "everything closed is staged: 0 B left in closed segments" in ran.text, ran.text

    # the operator's gate says no (Cruise Control is fixing something): nothing is stopped, the reasons are shown
    no = tmp_path / "no-go.sh"
    no.write_text(
        f'#!/bin/sh\necho "gate $1" >> {tmp_path / "events"}\necho "anomaly: disk failure on broker 3"\nexit 1\n'
    )
    no.chmod(0o755)
    argv = [*common, "--brokers", "1,2,3", "--stop-command", commands["stop"], "--gate-timeout", "0.3"]
    ran = run_cli(capsys, *(f"{no} {{broker}}" if a == commands["gate"] else a for a in argv))
    assert ran.code == 1, ran.text
    assert "broker 1: gate failed: the gate did not open within 0.3 s; nothing was stopped." in ran.text
    assert "| anomaly: disk failure on broker 3" in ran.text and "with --brokers 1,2,3" in ran.text
    assert set(events(tmp_path)) == {"gate 1"}  # asked (again, within the timeout), never stopped
    (tmp_path / "events").write_text("")

    # broker 1 is killed instead of stopped: no clean-shutdown marker, so it is refused and nothing moves on
    ran = run_cli(
        capsys, *common, "--brokers", "1,2,3", "--stop-command", commands["kill9"], "--shutdown-timeout", "120"
    )
    assert ran.code == 1, ran.text
    assert (
        "broker 1: release failed" in ran.text
        and "there is no clean-shutdown marker (.kafka_cleanshutdown)" in ran.text
    ), ran.text
    assert "Next: nothing was converted" in ran.text and "the same rolling command with --brokers 1,2,3" in ran.text
    assert events(tmp_path) == ["gate 1", "kill -9 1"]
    assert {b: partitions(d, HOLDINGS[b]) for b, d in brokers.items()} == before
    assert not (tmp_path / "run" / "broker-1.plan.json").exists()

    # the operator starts it again (Kafka recovers it) and runs the same command with a clean stop; broker 1's start
    # command fails after its conversion: the run stops there, and brokers 2 and 3 are not touched
    subprocess.run(commands["start"].replace("{broker}", "1").split(), check=True, capture_output=True)
    (tmp_path / "events").write_text("")
    fails = tmp_path / "start-fails.sh"
    fails.write_text(f'#!/bin/sh\necho "start-fail $1" >> {tmp_path / "events"}\necho "unit kafka@$1 failed"\nexit 1\n')
    fails.chmod(0o755)
    argv = [*common, "--brokers", "1,2,3", "--stop-command", commands["stop"]]
    ran = run_cli(capsys, *(f"{fails} {{broker}}" if a == commands["start"] else a for a in argv))
    assert ran.code == 1, ran.text
    assert "broker 1: execute ok" in ran.text, ran.text
    assert "3 segments converted and verified in the window, 4 taken from pre-staging" in ran.text
    # the cut-over against what its running peers staged for the same offsets: the replicas agree
    compared = re.search(
        r"broker 1: execute ok.*?; (\d+) converted segments compared with the running peers'", ran.text
    )
    assert compared is not None and int(compared[1]) > 0, ran.text
    assert "hold different records" not in ran.text
    assert f"broker 1: start failed: the start command `{fails} 1` exited 1; broker 1 is converted" in ran.text
    assert (
        "unit kafka@1 failed" in ran.text and "continue with: the same rolling command with --brokers 2,3" in ran.text
    )
    assert events(tmp_path) == ["gate 1", "stop 1", "start-fail 1"]
    assert {b: partitions(brokers[b], HOLDINGS[b]) for b in (2, 3)} == {b: before[b] for b in (2, 3)}

    # the operator starts broker 1 and continues with the others
    subprocess.run(commands["start"].replace("{broker}", "1").split(), check=True, capture_output=True)
    (tmp_path / "events").write_text("")
    ran = run_cli(capsys, *common, "--brokers", "2,3", "--stop-command", commands["stop"])
    assert ran.code == 0, ran.text
    assert "3 segments converted and verified in the window, 4 taken from pre-staging" in ran.text  # broker 2
    assert "2 segments converted and verified in the window, 2 taken from pre-staging" in ran.text  # broker 3
    assert events(tmp_path) == [
        event for b in (2, 3) for event in (f"gate {b}", f"stop {b}", f"start {b}", f"gate {b}")
    ]
    for b, d in brokers.items():
        plan = load_plan(tmp_path / "run" / f"broker-{b}.plan.json")
        assert [(x.broker_id, x.host) for x in plan.log_dirs] == [(b, c.hosts[b])]
        assert {p.name for p in plan.log_dirs[0].partitions} == set(HOLDINGS[b])
        for part in HOLDINGS[b]:
            for log in (d / part).glob("*.log"):
                assert log.read_bytes()[16] == 2, log  # magic of the first batch: v2
        assert (d / ".lock").exists() and not (d / ".kafka_cleanshutdown").exists()  # running again
    assert "broker 3: converted" in ran.text

    # roll broker 2 back: stopped as an operator would, its partitions are what they were, byte for byte
    subprocess.run(commands["stop"].replace("{broker}", "2").split(), check=True, capture_output=True)
    wait_stopped(brokers[2])
    secure = ["--scheduler", c.address, "--tls-dir", str(tls)]
    ran = run_cli(capsys, "rollback", "--plan", str(tmp_path / "run" / "broker-2.plan.json"), *secure)
    assert ran.code == 0, ran.text
    assert partitions(brokers[2], HOLDINGS[2]) == before[2]
    assert partitions(brokers[1], HOLDINGS[1]) != before[1]


def test_a_rolling_run_refuses_timestamps_from_each_brokers_mtime_unless_accepted(tmp_path, capsys):
    argv = ["rolling", "--brokers", "1", "--log-dirs", str(tmp_path), "--run-dir", str(tmp_path / "run")]
    argv += ["--stop-command", "true", "--start-command", "true", "--gate-command", "true", "--scheduler", "tls://x:1"]
    ran = run_cli(capsys, *argv)  # --timestamps mtime is plan's default
    assert ran.code == 1
    assert (
        "--timestamps mtime in a rolling run would give the same offsets different timestamps on different" in ran.text
    )
    assert not (tmp_path / "run").exists()
    ran = run_cli(capsys, *argv[:-2], "--timestamps", "none")
    assert (
        ran.code == 2 and "--scheduler" in ran.text
    )  # past the refusal: argparse wants the scheduler it was not given


def test_a_canary_migrated_alone_is_compared_with_the_others_when_they_run(cluster, tmp_path, capsys):
    c, roots, tls = cluster
    brokers = {b: make_broker_logdir(roots[b], parts, broker_id=b, name="canary-logs") for b, parts in HOLDINGS.items()}
    diverge(brokers[1] / "plain-v0-1" / "00000000000000000000.log")  # the canary's copy differs from broker 3's
    secure = ["--scheduler", c.address, "--tls-dir", str(tls)]
    plan = str(tmp_path / "plan.json")
    ran = run_cli(
        capsys, "plan", "--log-dirs", str(c.path_of(1) / "canary-logs"), "--brokers", "1,2,3", "-o", plan, *secure
    )
    assert ran.code == 0, ran.text

    # the canary alone, while broker 3's log dir cannot be read: what it could not compare, it says
    away = roots[3] / "canary-logs.away"
    brokers[3].rename(away)
    ran = run_cli(capsys, "execute", "--plan", plan, "--brokers", "1", "--require-consistent-replicas", *secure)
    away.rename(brokers[3])
    assert ran.code == 0, ran.text
    assert (
        "note: replicas of plain-v0-1 on broker(s) 3 were not compared with this run's: broker 3 (broker-3:" in ran.text
    )
    assert "canary-logs of broker 3 is not there on its host" in ran.text
    assert (
        "replicas of plain-v0-0" not in ran.text and "replicas of gzip-v0-0" not in ran.text
    )  # compared with broker 2: equal
    assert (brokers[1] / "plain-v0-1" / "00000000000000000000.log").read_bytes()[16] == 2  # swapped

    # the others later: compared with the canary's migrated copy, read only through broker 1's worker
    before_1 = snapshot(brokers[1])
    ran = run_cli(capsys, "execute", "--plan", plan, "--brokers", "2,3", "--require-consistent-replicas", *secure)
    assert ran.code == 1, ran.text
    assert "replicas of plain-v0-1 differ across brokers 3, 1: first in offsets 0..59" in ran.text
    assert (brokers[3] / "plain-v0-1" / "00000000000000000000.log").read_bytes()[16] == 0  # not swapped on 3
    assert (brokers[3] / "lz4-v1-1" / "00000000000000000000.log").read_bytes()[16] == 2
    assert all((brokers[2] / p / "00000000000000000000.log").read_bytes()[16] == 2 for p in HOLDINGS[2])
    assert snapshot(brokers[1]) == before_1  # the canary was only read


def admin_cluster(ibp_of_broker_2: str) -> AdminCluster:
    """The Admin API of the three brokers, healthy; broker 2 at ``ibp_of_broker_2`` with the old message format."""
    replicas = sorted(HOLDINGS)
    return AdminCluster(
        brokers={b: True for b in HOLDINGS},
        topics={"orders": [(0, 1, replicas, replicas)]},
        broker_configs={
            1: {"inter.broker.protocol.version": "3.9", "log.message.format.version": "3.9"},
            2: {"inter.broker.protocol.version": ibp_of_broker_2, "log.message.format.version": "0.10.2-IV0"},
            3: {"inter.broker.protocol.version": "3.9", "log.message.format.version": "3.9"},
        },
    )


def rolling_argv(c, brokers, commands, tls, tmp_path, kafka) -> list[str]:
    return [
        "rolling",
        "--brokers",
        "1,2,3",
        "--log-dirs",
        str(c.path_of(1) / "rolling-logs"),
        "--run-dir",
        str(tmp_path / "run"),
        "--bootstrap-server",
        kafka.bootstrap,
        "--gate-interval",
        "0.2",
        "--gate-timeout",
        "20",
        "--stop-command",
        commands["stop"],
        "--start-command",
        commands["start"],
        "--scheduler",
        c.address,
        "--tls-dir",
        str(tls),
        "--timestamps",
        "none",
    ]


def test_a_broker_that_writes_v1_refuses_the_run_before_any_stop_naming_it_and_its_settings(running, tmp_path, capsys):
    c, brokers, commands, tls = running
    before = {b: partitions(d, HOLDINGS[b]) for b, d in brokers.items()}
    with KafkaAdminStub(admin_cluster("2.8-IV1")) as kafka:
        ran = run_cli(capsys, *rolling_argv(c, brokers, commands, tls, tmp_path, kafka))
    assert ran.code == 1, ran.text
    assert "refusing the rolling run, nothing was stopped: not every broker writes v2." in ran.text
    assert (
        "broker 2 has inter.broker.protocol.version 2.8-IV1, log.message.format.version 0.10.2-IV0: as a leader it "
        "writes v1 batches" in ran.text
    )
    assert (
        "Set inter.broker.protocol.version=3.0 or higher" in ran.text and "not started: broker(s) 1, 2, 3" in ran.text
    )
    assert events(tmp_path) == []  # no broker was stopped
    assert {b: partitions(d, HOLDINGS[b]) for b, d in brokers.items()} == before


def test_a_refusal_that_needs_no_stopped_broker_is_found_before_the_first_stop(running, tmp_path, capsys):
    c, brokers, commands, tls = running
    # an earlier migration of broker 3, neither finalized nor rolled back: its plan would be refused after the stop
    subprocess.run(commands["stop"].replace("{broker}", "3").split(), check=True, capture_output=True)
    wait_stopped(brokers[3])
    earlier = tmp_path / "earlier.json"
    assert main(["plan", "--log-dirs", str(brokers[3]), "--timestamps", "none", "-o", str(earlier)]) == 0
    assert main(["execute", "--plan", str(earlier), "--engine", "serial"]) == 0
    subprocess.run(commands["start"].replace("{broker}", "3").split(), check=True, capture_output=True)
    (tmp_path / "events").write_text("")
    capsys.readouterr()
    with KafkaAdminStub(admin_cluster("3.9")) as kafka:
        ran = run_cli(capsys, *rolling_argv(c, brokers, commands, tls, tmp_path, kafka))
    assert ran.code == 1, ran.text
    assert "refusing the rolling run, nothing was stopped:" in ran.text
    assert (
        "broker 3: " in ran.text and "holds the state of a migration that was not finalized or rolled back" in ran.text
    )
    assert events(tmp_path) == []


def test_a_v1_append_slipped_in_after_a_cut_over_means_the_run_does_not_end_v2_only(running, tmp_path, capsys):
    c, brokers, commands, tls = running
    # broker 2, once started again, follows a leader that still writes v1: its fetcher appends those batches as is
    follower = tmp_path / "start-and-follow-v1.sh"
    copy_v1 = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from pathlib import Path; "
        f"from broker_life import append; append(Path({str(brokers[2] / 'gzip-v0-0')!r}), 3, magic=1)"
    )
    follower.write_text(
        f"#!/bin/sh\nset -e\n{commands['start'].replace('{broker}', '$1')}\n"
        f'if [ "$1" = 2 ]; then {sys.executable} -c "{copy_v1}"; fi\n'
    )
    follower.chmod(0o755)
    with KafkaAdminStub(admin_cluster("3.9")) as kafka:
        argv = rolling_argv(c, brokers, commands, tls, tmp_path, kafka)
        argv[argv.index(commands["start"])] = f"{follower} {{broker}}"
        code = main(argv)
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert code == 4, out
    assert "broker 3: converted" in out
    assert "legacy data: gzip-v0-0 in " in out and "hold v0/v1 batches again (gzip-v0-0)" in out
    last = captured.out.strip().splitlines()[-1]  # the report's last line, after the progress notes
    assert "Every broker is converted and back, but the cluster is NOT v2-only: 1 partition(s)" in last
    assert "v2-only: the log dirs of" not in out
