"""The operator's verbs through the real command line: plan, execute, verify, status, rollback, finalize, demo."""

from __future__ import annotations

import json

from kafka_layout import make_broker_logdir
from runs import snapshot

from migrate.cli import main


def test_plan_execute_verify_status_rollback(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "lz4-v1-1"])
    before = snapshot(log_dir)
    plan = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["segments"] == 4 and summary["plan_id"] == json.loads(plan.read_text())["plan_id"]
    assert main(["execute", "--plan", str(plan), "--engine", "serial"]) == 0
    out = capsys.readouterr().out
    assert "4 segments converted and verified" in out and "2 of 2 partitions migrated; fence down" in out
    assert main(["verify", "--plan", str(plan), "--engine", "serial"]) == 0
    assert main(["scan", "--log-dirs", str(log_dir)]) == 0
    assert main(["rollback", "--plan", str(plan)]) == 0
    assert snapshot(log_dir) == before
    assert main(["scan", "--log-dirs", str(log_dir)]) == 4


def test_status_shows_every_partition_migrated_and_the_history_after_finalize(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["gzip-v0-0"])
    plan = tmp_path / "plan.json"
    main(["plan", "--log-dirs", str(log_dir), "-o", str(plan)])
    main(["execute", "--plan", str(plan), "--engine", "serial"])
    capsys.readouterr()
    assert main(["status", "--plan", str(plan), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["log_dirs"][0]["phase"] == "migrated"
    assert [(p["partition"], p["state"]) for p in status["log_dirs"][0]["partitions"]] == [("gzip-v0-0", "migrated")]
    assert main(["finalize", "--plan", str(plan)]) == 0
    assert not list(log_dir.glob("*/.kafka-log-migrate*")) and not list(log_dir.glob(".kafka-log-migrate*"))
    capsys.readouterr()
    assert main(["status", "--plan", str(plan)]) == 0
    assert f"{log_dir}: finalized: 1 migrated" in capsys.readouterr().out


def test_refusals_exit_1_with_a_message_that_says_what_to_do(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"], clean_shutdown=False)
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(tmp_path / "p.json")]) == 1
    err = capsys.readouterr().err
    assert "kafka-log-migrate: error: refusing to plan" in err and "stop it cleanly" in err
    assert not (tmp_path / "p.json").exists()


def test_demo_migrates_its_generated_log_dir(tmp_path):
    assert main(["demo", "--dir", str(tmp_path / "demo"), "--records", "300", "--engine", "serial", "--rollback"]) == 0
