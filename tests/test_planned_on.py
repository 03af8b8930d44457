"""The host that planned is part of a plan's identity, and execute runs a plan of one host's log dirs on that host
only: the same paths elsewhere are other files."""

from __future__ import annotations

import dataclasses
import json
import socket

from kafka_layout import make_broker_logdir
from runs import snapshot

from migrate.cli import main
from migrate.model.plan_columns import plan_id_of
from migrate.planning.plan import build_plan, load_plan, write_plan
from migrate.planning.request import PlanRequest

PARTITIONS = ["plain-v0-1", "gzip-v0-0"]


def test_an_edited_planned_on_is_refused_as_any_edit(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(path)]) == 0
    body = json.loads(path.read_text())
    assert body["planned_on"] == socket.gethostname()
    body["planned_on"] = "broker-7.example"
    path.write_text(json.dumps(body, indent=2))
    capsys.readouterr()
    assert main(["execute", "--plan", str(path), "--engine", "serial"]) == 1
    err = capsys.readouterr().err
    assert "was edited after it was made" in err and "the host that planned it included" in err, err


def test_both_forms_seal_the_planning_host_into_the_id(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    for name in ("plan.json", "plan.parquet"):
        write_plan(build_plan(PlanRequest(log_dirs=(str(log_dir),))), tmp_path / name)
        plan = load_plan(tmp_path / name)
        moved = dataclasses.replace(plan, planned_on="broker-7.example")
        assert plan_id_of(moved) != plan.plan_id == plan_id_of(plan), name


def test_a_plan_made_on_another_host_is_refused_by_execute_and_changes_nothing(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),)))
    there = dataclasses.replace(plan, planned_on="broker-7.example")
    there = dataclasses.replace(there, plan_id=plan_id_of(there))  # whole and unedited: made there
    path = tmp_path / "plan.json"
    write_plan(there, path)
    before = snapshot(log_dir)
    capsys.readouterr()
    assert main(["execute", "--plan", str(path), "--engine", "serial"]) == 1
    err = capsys.readouterr().err
    here = socket.gethostname()
    assert f"plan {there.plan_id} was made on host broker-7.example" in err and f"this host is {here}" in err, err
    assert f"kafka-log-migrate plan --log-dirs {log_dir} -o PLAN" in err
    assert snapshot(log_dir) == before


def test_a_plan_written_before_the_host_was_sealed_still_loads_and_runs_here(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),)))
    older = dataclasses.replace(plan, plan_id=plan_id_of(plan, seal_host=False))
    assert older.plan_id != plan.plan_id
    path = tmp_path / "plan.json"
    write_plan(older, path)
    assert load_plan(path).plan_id == older.plan_id
    assert main(["execute", "--plan", str(path), "--engine", "serial"]) == 0


def test_a_plan_pinned_to_worker_hosts_is_not_judged_by_the_planning_host(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), host_map=((str(log_dir), "10.0.0.5"),)))
    assert plan.log_dirs[0].host == "10.0.0.5"
    dataclasses.replace(plan, planned_on="scheduler-host").refuse_if_planned_elsewhere(socket.gethostname())
