"""The operator's verbs through the real command line: plan, execute, verify, status, rollback, finalize, demo."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from conftest import run_cli
from kafka_layout import make_broker_logdir
from runs import snapshot

from migrate.cli import VERBS, build_parser, main


def _verbs(parser: argparse.ArgumentParser) -> set[str]:
    return set(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


def test_each_verb_is_registered_by_the_module_the_cli_imports_for_it():
    assert _verbs(build_parser()) == set(VERBS)
    for verb in VERBS:
        assert verb in _verbs(build_parser(verb))
        assert _verbs(build_parser(verb)) == {v for v, module in VERBS.items() if module == VERBS[verb]}


def test_plan_loads_neither_the_report_nor_the_rehearsal_nor_dump():
    heavy = ("pyarrow", "migrate.reports.run_report", "migrate.rehearse.driver", "migrate.reports.dump")
    code = (
        "import sys\nfrom migrate.cli import main\nassert main(['plan', '--help']) == 0\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.splitlines()[-1] == "[]"


def test_plan_execute_verify_status_rollback(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "lz4-v1-1"])
    before = snapshot(log_dir)
    plan = tmp_path / "plan.json"
    ran = run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan), "--json")
    assert ran.code == 0
    summary = json.loads(ran.out)
    assert summary["segments"] == 4 and summary["plan_id"] == json.loads(plan.read_text())["plan_id"]
    ran = run_cli(capsys, "execute", "--plan", str(plan), "--engine", "serial")
    assert ran.code == 0
    out = ran.out
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
    run_cli(capsys, "execute", "--plan", str(plan), "--engine", "serial")
    ran = run_cli(capsys, "status", "--plan", str(plan), "--json")
    assert ran.code == 0
    status = json.loads(ran.out)
    assert status["log_dirs"][0]["phase"] == "migrated"
    assert [(p["partition"], p["state"]) for p in status["log_dirs"][0]["partitions"]] == [("gzip-v0-0", "migrated")]
    assert main(["finalize", "--plan", str(plan)]) == 0
    assert not list(log_dir.glob("*/.kafka-log-migrate*")) and not list(log_dir.glob(".kafka-log-migrate*"))
    capsys.readouterr()
    ran = run_cli(capsys, "status", "--plan", str(plan))
    assert ran.code == 0  # the phase in words, then the counts: not "finalized: 1 migrated"
    assert f"{log_dir}: finalized (its originals deleted); 1 planned partition(s): 1 migrated" in ran.out


def test_refusals_exit_1_with_a_message_that_says_what_to_do(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"], clean_shutdown=False)
    ran = run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(tmp_path / "p.json"))
    assert ran.code == 1
    err = ran.err
    assert "kafka-log-migrate: error: refusing to plan" in err and "stop it cleanly" in err
    assert not (tmp_path / "p.json").exists()


def test_demo_migrates_its_generated_log_dir(tmp_path):
    assert main(["demo", "--dir", str(tmp_path / "demo"), "--records", "300", "--engine", "serial", "--rollback"]) == 0


def test_plan_digest_and_range_options_reach_the_plan_and_the_run(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    default, chosen = tmp_path / "default.json", tmp_path / "chosen.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(default)]) == 0
    options = json.loads(default.read_text())["options"]
    assert options["digest"] == "xxh3-128"
    assert all("byte_range" not in t for t in json.loads(default.read_text())["tasks"])
    assert (
        main(["plan", "--log-dirs", str(log_dir), "-o", str(chosen), "--digest", "sha256", "--range-bytes", "3000"])
        == 0
    )
    plan = json.loads(chosen.read_text())
    assert plan["options"]["digest"] == "sha256"
    # 2,060 bytes stay one task; 8,468 bytes become 3 ranges of about 3,000, cut at the first entry start after
    # each nominal third (2,822 and 5,645), with the place of each range's converted bytes (uncompressed v0)
    tasks = [(t["segments"][0]["base_offset"], t.get("byte_range")) for t in plan["tasks"]]
    assert tasks == [
        (30, {"index": 0, "count": 3, "start": 0, "end": 2826, "output_start": 0, "output_end": 3310}),
        (30, {"index": 1, "count": 3, "start": 2826, "end": 5772, "output_start": 3310, "output_end": 6652}),
        (30, {"index": 2, "count": 3, "start": 5772, "end": 8468, "output_start": 6652, "output_end": 9788}),
        (0, None),
    ]
    ran = run_cli(capsys, "execute", "--plan", str(chosen), "--engine", "serial")
    assert ran.code == 0
    assert "2 segments converted and verified" in ran.out
    assert (log_dir / "plain-v0-1" / f"{30:020d}.log").stat().st_size == 9788
    assert main(["scan", "--log-dirs", str(log_dir)]) == 0
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(chosen), "--range-bytes", "-1"]) == 2


def test_a_plan_pinned_to_other_hosts_is_refused_at_once_without_a_scheduler(tmp_path, capsys):
    import dataclasses

    from migrate.codec import to_json
    from migrate.model.plan_tree import dump_plan_json, load_plan_json

    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    before = snapshot(log_dir)
    plan = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan)]) == 0
    loaded = load_plan_json(plan.read_text())

    pinned = dataclasses.replace(
        loaded, log_dirs=tuple(dataclasses.replace(d, host="10.9.9.9") for d in loaded.log_dirs)
    )
    pinned = dataclasses.replace(pinned, plan_id=pinned.content_id())
    plan.write_text(dump_plan_json(pinned))
    assert to_json(load_plan_json(plan.read_text()))["log_dirs"][0]["host"] == "10.9.9.9"
    capsys.readouterr()
    for verb in ("execute", "verify"):
        ran = run_cli(capsys, verb, "--plan", str(plan))
        assert ran.code == 1
        err = ran.err
        assert "pins its log dirs to 10.9.9.9" in err and "--scheduler ADDRESS" in err, err
    assert snapshot(log_dir) == before
    assert not list(log_dir.glob(".kafka-log-migrate-*.db"))  # nothing left behind that blocks the next plan


def test_the_dashboard_line_says_when_the_asked_port_was_taken():
    from migrate.commands.engine import dashboard_line

    moved = dashboard_line("http://127.0.0.1:40123/status", "http://127.0.0.1:40123/migration", "127.0.0.1:8787")
    assert moved.endswith("port 8787 was taken, so the dashboard listens on 40123")
    kept = dashboard_line("http://127.0.0.1:8787/status", "http://127.0.0.1:8787/migration", "127.0.0.1:8787")
    assert "taken" not in kept and kept.startswith("Dask dashboard: http://127.0.0.1:8787/status")
    assert "taken" not in dashboard_line("http://127.0.0.1:40123/status", "x", "127.0.0.1:0")  # any port asked


def test_a_running_schedulers_dashboard_is_not_said_to_have_moved_off_the_asked_port(capsys):
    """With --scheduler the dashboard is the remote scheduler's, wherever its operator put it: the LocalCluster's
    --dashboard-address default (8787) was compared with it and "port 8787 was taken" printed, nothing being taken."""
    from distributed import LocalCluster

    from migrate.commands.engine import make_engine

    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address="127.0.0.1:0") as remote:
        port = remote.scheduler.http_server.port
        assert port != 8787
        address = remote.scheduler_address
        args = build_parser("execute").parse_args(["execute", "--plan", "p.json", "--scheduler", address])
        engine, _ = make_engine(args)
        try:
            err = capsys.readouterr().err
        finally:
            engine.close()
    assert f"Dask dashboard: http://127.0.0.1:{port}/status" in err, err
    assert "taken" not in err, err


def test_rolling_help_offers_no_unclean_plan_and_shows_its_command_timeout(capsys):
    """rolling refuses a broker that was killed or crashed: its --help offered plan's --allow-unclean, which says the
    opposite, and gave --command-timeout no default."""
    assert main(["rolling", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--allow-unclean" not in text and "a stop or start command may take (600)" in text, text
    args = build_parser("rolling").parse_args(
        [
            "rolling",
            "--brokers",
            "1",
            "--run-dir",
            "r",
            "--stop-command",
            "x",
            "--start-command",
            "y",
            "--scheduler",
            "s",
        ]
    )
    assert args.allow_unclean is False  # what the rolling plans are made with
