"""One plan for a whole cluster, on a real Dask cluster: a TLS scheduler (the monitor preloaded) and three worker
processes acting as brokers, each in its own mount namespace where its own data is bound onto the same path, as every
broker of a real cluster keeps its data at one path. Plan, execute (the canary broker first, then the others),
verify, rollback and finalize across them; replicas are compared across brokers."""

from __future__ import annotations

import json
import struct
import urllib.request
import zlib
from pathlib import Path

import pytest
from cluster_harness import BrokerCluster, can_unshare, make_tls
from conftest import expected_summaries, needs_root_power, run_cli
from kafka_layout import make_broker_logdir
from runs import snapshot

from migrate.cluster.parts import load_part
from migrate.format.entries import walk_entries
from migrate.model.cluster_manifest import load_manifest_json
from migrate.model.plan_tree import PlanForm
from migrate.planning.cluster import ClusterPlanRefusedError, merge
from migrate.planning.plan import load_plan
from migrate.planning.request import BrokerSurvey

pytestmark = pytest.mark.slow
SUMMARIES = expected_summaries()
# which fixture partitions each broker holds: replicas of plain-v0-0 and gzip-v0-0 on 1 and 2, of lz4-v1-1 on 2 and
# 3, of plain-v0-1 on 1 and 3 (broker 3's copy diverges)
HOLDINGS = {
    1: ["plain-v0-0", "gzip-v0-0", "plain-v0-1"],
    2: ["plain-v0-0", "gzip-v0-0", "lz4-v1-1"],
    3: ["lz4-v1-1", "plain-v0-1"],
}


def diverge(segment: Path) -> int:
    """Change the last value byte of the message holding offset 7 and fix its CRC-32 (every reader accepts it)."""
    data = bytearray(segment.read_bytes())
    walk = walk_entries(bytes(data))
    for p, size in zip(walk.positions.tolist(), walk.sizes.tolist()):
        if struct.unpack_from(">q", data, p)[0] == 7:
            data[p + size - 1] ^= 0x01
            struct.pack_into(">I", data, p + 12, zlib.crc32(bytes(data[p + 16 : p + size])) & 0xFFFFFFFF)
            segment.write_bytes(bytes(data))
            return 7
    raise AssertionError("no offset 7")


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def brokers(tmp_path):
    out = {}
    for b, parts in HOLDINGS.items():
        out[b] = make_broker_logdir(tmp_path / f"b{b}", partitions=parts, broker_id=b)
    diverge(out[3] / "plain-v0-1" / "00000000000000000000.log")
    return out


def test_a_cluster_is_planned_on_its_brokers_and_migrated_canary_first(tls, brokers, tmp_path, capsys, oracle):
    if not can_unshare():
        needs_root_power("brokers at one path need mount namespaces (unshare -m)")
    data = tmp_path / "data"
    before = {b: snapshot(d) for b, d in brokers.items()}
    with BrokerCluster(tls, brokers, data, preload="migrate.monitor") as cluster:
        secure = ["--scheduler", cluster.address, "--tls-dir", str(tls)]
        plan_path = tmp_path / "cluster-plan.json"
        ran = run_cli(capsys, "plan", "--log-dirs", str(data), "--brokers", "1,2,3", "-o", str(plan_path), *secure)
        assert ran.code == 0, ran.text
        plan = load_plan(plan_path)
        assert [(d.key, d.host, d.broker_id) for d in plan.log_dirs] == [
            (f"broker-{b}:{data}", cluster.hosts[b], b) for b in (1, 2, 3)
        ]
        assert {p.name for p in plan.log_dir(f"broker-3:{data}").partitions} == set(HOLDINGS[3])

        # the canary broker alone first: the others are not touched
        ran = run_cli(capsys, "execute", "--plan", str(plan_path), "--brokers", "1", *secure)
        assert ran.code == 0, ran.text
        assert snapshot(brokers[2]) == before[2] and snapshot(brokers[3]) == before[3]
        ran = run_cli(capsys, "status", "--plan", str(plan_path), "--json", *secure)
        assert ran.code == 0
        status = json.loads(ran.out)
        assert [d["log_dir"] for d in status["log_dirs"]] == [f"broker-1:{data}"]
        assert status["not_started"] == [f"broker-2:{data}", f"broker-3:{data}"]

        ran = run_cli(capsys, "execute", "--plan", str(plan_path), *secure)
        assert ran.code == 0, ran.text
        assert "replicas of plain-v0-1 differ across brokers 1, 3: first in offsets 0..59" in ran.text
        ran = run_cli(capsys, "verify", "--plan", str(plan_path), *secure)
        assert ran.code == 0, ran.text

        # every broker's data is converted, as Kafka reads it; identical replicas became identical bytes
        for b, parts in HOLDINGS.items():
            for part in parts:
                summary = oracle.summary(brokers[b] / part)[0]
                assert summary["valid"] and set(summary["magics"]) == {"2"}, (b, part)
                if (b, part) != (3, "plain-v0-1"):
                    assert summary["sha256"] == SUMMARIES[part]["sha256"], (b, part)
        for part in ("plain-v0-0", "gzip-v0-0"):
            for log in sorted((brokers[1] / part).glob("*.log")):
                assert log.read_bytes() == (brokers[2] / part / log.name).read_bytes(), log

        # the migration page and metrics on the operator's own scheduler, with the tool's preload
        info = json.loads((tls / "scheduler.json").read_text())
        page = f"http://127.0.0.1:{info['services']['dashboard']}"
        with urllib.request.urlopen(f"{page}/migration/status.json", timeout=10) as r:
            live = json.loads(r.read())
        assert live["plan"]["plan_id"] == plan.plan_id

        ran = run_cli(capsys, "rollback", "--plan", str(plan_path), *secure)
        assert ran.code == 0, ran.text
        assert {b: snapshot(d) for b, d in brokers.items()} == before
        # the states are archived beside the plan now: each goes to its broker's worker in pieces for verify
        ran = run_cli(capsys, "verify", "--plan", str(plan_path), *secure)
        assert ran.code == 0 and "rolled" in ran.text.lower(), ran.text

        assert run_cli(capsys, "execute", "--plan", str(plan_path), "--require-consistent-replicas", *secure).code == 1
        ran = run_cli(capsys, "status", "--plan", str(plan_path), *secure)
        assert "plain-v0-1" in ran.text and "replicas of plain-v0-1 differ across brokers 1, 3" in ran.text
        assert (brokers[1] / "plain-v0-1" / "00000000000000000000.log").read_bytes() == (
            before_bytes := (tmp_path / "b1" / "kafka-logs" / "plain-v0-1" / "00000000000000000000.log").read_bytes()
        )
        assert before_bytes[16] == 0  # still magic 0: not swapped on any broker
        assert run_cli(capsys, "finalize", "--plan", str(plan_path), "--partial", *secure).code == 0
        for d in brokers.values():
            assert not list(d.glob("*/.kafka-log-migrate*")) and not list(d.glob(".kafka-log-migrate*"))


def test_plan_time_refusals_name_the_broker(tls, brokers, tmp_path, capsys):
    if not can_unshare():
        needs_root_power("brokers at one path need mount namespaces (unshare -m)")
    import subprocess
    import sys

    data = tmp_path / "data"
    (brokers[3] / "meta.properties").write_text(
        (brokers[3] / "meta.properties").read_text().replace("cluster.id=", "cluster.id=OTHER")
    )
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.lockf(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); time.sleep(120)",
            str(brokers[2] / ".lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with BrokerCluster(tls, brokers, data) as cluster:
            ran = run_cli(
                capsys,
                "plan",
                "--log-dirs",
                str(data),
                "--brokers",
                "1,2,3,4",
                "-o",
                str(tmp_path / "p.json"),
                "--scheduler",
                cluster.address,
                "--tls-dir",
                str(tls),
            )
    finally:
        holder.kill()
        holder.wait()
    assert ran.code == 1 and not (tmp_path / "p.json").exists()
    assert f"broker 2 ({cluster.address.split('://')[0]}://{cluster.hosts[2]}:" in ran.text
    assert f"process {holder.pid} holds the fcntl lock" in ran.text
    assert "different clusters" in ran.text and "brokers 3" in ran.text
    assert "broker 4 has no worker. On its host run: dask worker" in ran.text and "--name broker-4" in ran.text


def test_merge_refuses_two_workers_claiming_one_broker():
    a = BrokerSurvey("tls://10.0.0.5:40000", "10.0.0.5", 1, "c", ("/data",))
    b = BrokerSurvey("tls://10.0.0.6:40000", "10.0.0.6", 1, "c", ("/data",))
    with pytest.raises(ClusterPlanRefusedError, match=r"broker 1 is claimed by 2 workers \(tls://10.0.0.5:40000, tls"):
        merge([a, b], (1,), "tls://10.0.0.1:8786")


def test_a_manifest_keeps_each_brokers_part_on_its_broker(tls, brokers, tmp_path, capsys):
    """plan --manifest: each broker's worker keeps its own columnar part; the client's manifest names them; every
    verb runs each broker's part on that broker and says per broker how it went; an edited part fails its broker."""
    if not can_unshare():
        needs_root_power("brokers at one path need mount namespaces (unshare -m)")
    data = tmp_path / "data"
    before = {b: snapshot(d) for b, d in brokers.items()}
    with BrokerCluster(tls, brokers, data) as cluster:
        secure = ["--scheduler", cluster.address, "--tls-dir", str(tls)]
        path = tmp_path / "cluster.manifest.json"
        ran = run_cli(
            capsys, "plan", "--log-dirs", str(data), "--brokers", "1,2,3", "--manifest", "-o", str(path), *secure
        )
        assert ran.code == 0, ran.text
        manifest = load_manifest_json(path.read_text())
        assert [b.broker_id for b in manifest.brokers] == [1, 2, 3]
        assert manifest.estimates.partitions == sum(len(p) for p in HOLDINGS.values())
        assert path.stat().st_size < 8192  # the client holds no segment
        for part in manifest.brokers:
            assert part.host == cluster.hosts[part.broker_id]
            held = load_part(part)  # a columnar plan of that broker's own partitions only
            assert held.form == PlanForm.COLUMNAR
            assert {p.name for p in held.log_dirs[0].partitions} == set(HOLDINGS[part.broker_id])

        ran = run_cli(capsys, "execute", "--plan", str(path), *secure)
        assert ran.code == 0, ran.text
        assert "manifest " + manifest.manifest_id + ": execute ok on every broker (3)" in ran.text
        for b, parts in HOLDINGS.items():
            for name in parts:
                for log in (brokers[b] / name).glob("*.log"):
                    assert log.read_bytes()[16] == 2, log  # magic 2 on every broker
        ran = run_cli(capsys, "status", "--plan", str(path), *secure)
        assert ran.code == 0 and "broker 2: status ok: 3 of 3 partitions" in ran.text, ran.text
        ran = run_cli(capsys, "verify", "--plan", str(path), *secure)
        assert ran.code == 0, ran.text
        ran = run_cli(capsys, "rollback", "--plan", str(path), *secure)
        assert ran.code == 0, ran.text
        assert {b: snapshot(d) for b, d in brokers.items()} == before

        edited = Path(manifest.part(3).path)
        edited.write_bytes(edited.read_bytes() + b"\0")
        ran = run_cli(capsys, "status", "--plan", str(path), *secure)
        assert ran.code == 1
        assert "broker 3: status FAILED" in ran.text and "not the file the manifest names" in ran.text
        assert "broker 1: status ok" in ran.text and "broker 2: status ok" in ran.text
