"""The plan's check table: refusals are records (kind, place, advice) with the operator's text, and prepare's re-check
refuses what changed in a log dir since planning."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
from conftest import run_cli
from kafka_layout import make_broker_logdir

from migrate.errors import ExecuteRefusedError, ProblemKind
from migrate.planning.checks import CHECKS, Scope, recheck_log_dir
from migrate.planning.plan import PlanRefusedError, build_plan
from migrate.planning.request import PlanRequest
from migrate.run.workspace import FENCE_NAME


@pytest.fixture
def broker(tmp_path: Path) -> Path:
    return make_broker_logdir(tmp_path, partitions=["plain-v0-0", "lz4-v1-1"])


def refusal(log_dir: Path, **kw) -> PlanRefusedError:
    with pytest.raises(PlanRefusedError) as info:
        build_plan(PlanRequest(log_dirs=(str(log_dir),), **kw))
    return info.value


def test_every_row_has_advice_and_prepare_reruns_only_what_needs_no_plan_options():
    assert all(check.advice.strip() for check in CHECKS)
    rerun = {check.scope for check in CHECKS if check.at_prepare}
    assert rerun <= {Scope.LOG_DIR_PATH, Scope.LOG_DIR, Scope.PARTITION}
    # --allow-unclean is not in the plan, so prepare cannot know whether an unclean log dir was accepted
    assert ProblemKind.UNCLEAN_SHUTDOWN not in {check.kind for check in CHECKS if check.at_prepare}


def test_a_refusal_carries_one_record_per_problem_in_the_order_the_message_lists_them(broker):
    (broker / ".kafka_cleanshutdown").unlink()
    (broker / "lz4-v1-1" / "00000000000000000000.log.swap").write_bytes(b"")

    exc = refusal(broker)

    assert [p.kind for p in exc.problems] == [ProblemKind.UNCLEAN_SHUTDOWN, ProblemKind.STRAY_FILES]
    assert [p.path for p in exc.problems] == [str(broker), str(broker / "lz4-v1-1")]
    assert str(exc) == "refusing to plan (2 problems):\n  - " + "\n  - ".join(p.message for p in exc.problems)
    assert all(p.advice and p.advice in p.message for p in exc.problems)
    assert pickle.loads(pickle.dumps(exc)).problems == exc.problems


def test_a_bad_checksum_is_located_by_the_record_not_by_its_text(broker):
    segment = broker / "plain-v0-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[40] ^= 0xFF  # inside the first message's payload: its CRC no longer matches
    segment.write_bytes(bytes(data))

    [problem] = refusal(broker).problems

    assert (problem.kind, problem.path, problem.position, problem.offset) == (
        ProblemKind.CORRUPT,
        str(segment),
        0,
        0,
    )
    assert "CRC-32 of the message does not match" in problem.message and "restore the partition" in problem.advice


def test_prepare_recheck_refuses_what_changed_since_planning(broker):
    plan = build_plan(PlanRequest(log_dirs=(str(broker),)))
    entry = plan.log_dirs[0]
    recheck_log_dir(entry, plan.plan_id)  # nothing changed: no refusal

    (broker / FENCE_NAME).mkdir()
    (broker / "plain-v0-0" / "00000000000000000040.log.cleaned").write_bytes(b"")
    with pytest.raises(ExecuteRefusedError, match=r"refusing to execute \(2 problems\)") as info:
        recheck_log_dir(entry, plan.plan_id)
    assert [p.kind for p in info.value.problems] == [ProblemKind.MIGRATION_IN_PROGRESS, ProblemKind.STRAY_FILES]


def test_plan_json_lists_every_refusal_as_a_record(broker, tmp_path, capsys):
    for name in ("plain-v0-0", "lz4-v1-1"):  # two partitions, each with a file a broker left mid-operation
        (broker / name / "00000000000000000000.log.swap").write_bytes(b"")
    result = run_cli(capsys, "plan", "--log-dirs", str(broker), "-o", str(tmp_path / "plan.json"), "--json")
    assert result.code == 1 and "refusing to plan (2 problems)" in result.err
    refused = json.loads(result.out)["refused"]
    assert [(r["kind"], r["path"]) for r in refused] == [
        ("stray-files", str(broker / "lz4-v1-1")),
        ("stray-files", str(broker / "plain-v0-0")),
    ]
    assert all(r["advice"] and r["advice"] in r["message"] for r in refused)
    assert not (tmp_path / "plan.json").exists()


def test_execute_json_lists_a_crc_failure_with_its_kind_file_position_and_advice(broker, tmp_path, capsys):
    plan_path = tmp_path / "plan.json"
    assert run_cli(capsys, "plan", "--log-dirs", str(broker), "-o", str(plan_path)).code == 0
    segment = broker / "plain-v0-0" / "00000000000000000000.log"
    st = segment.stat()
    data = bytearray(segment.read_bytes())
    data[40] ^= 0xFF  # after the plan, in place, its mtime put back (rot): execute's own read finds it
    with open(segment, "r+b") as f:
        f.write(bytes(data))
    os.utime(segment, ns=(st.st_atime_ns, st.st_mtime_ns))
    result = run_cli(capsys, "execute", "--plan", str(plan_path), "--engine", "serial", "--json")
    assert result.code == 1, result.text
    report = json.loads(result.out)
    problems = [p["problem"] for d in report["log_dirs"] for p in d["partitions"] if p["problem"]]
    assert [(p["kind"], p["path"], p["position"]) for p in problems] == [("corrupt", str(segment), 0)], problems
    assert "dump --deep-iteration" in problems[0]["advice"] and problems[0]["advice"] in problems[0]["message"]
