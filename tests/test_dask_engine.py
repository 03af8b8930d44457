"""The Dask engine on a real multi-host layout: a scheduler and workers on 127.0.0.1 and 127.0.0.2 (two "hosts")."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dask
import psutil
import pytest
from distributed import get_worker
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees

from migrate import pipeline
from migrate.engines import StageCall
from migrate.engines.dask import LOCAL_CLUSTER_PERIODS, DaskEngine, _key, _local_cluster_periods, worth_workers
from migrate.model.plan_tree import DigestAlgorithm
from migrate.model.run_state import Stage
from migrate.planning.plan import build_plan
from migrate.planning.request import PlanRequest

# one xdist worker: its scheduler and two host workers start once
pytestmark = pytest.mark.xdist_group("dask_engine")

PROBE = Stage.SURVEY  # any stage: it only names the probes' Dask tasks


def whoami(_: int) -> str:
    return get_worker().address


@pytest.fixture(scope="module")
def two_host_cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    sched_file = folder / "scheduler.json"
    # workers import this module to run ``whoami``
    tests = str(Path(__file__).parent)
    env = {
        **os.environ,
        "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT": "3s",
        "PYTHONPATH": os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH", "")) if p),
    }
    procs: list[subprocess.Popen] = []
    engine = None
    # the processes go whatever happens: a setup that fails half way (a scheduler up, an engine that never connects)
    # left them running beside the rest of the suite and every benchmark after it
    try:
        engine = _start_two_hosts(procs, sched_file, env)
        yield engine
    finally:
        if engine is not None:
            engine.close()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def _start_two_hosts(procs: list[subprocess.Popen], sched_file: Path, env: dict[str, str]):
    """A scheduler and a worker on each of 127.0.0.1 and 127.0.0.2, appended to ``procs`` as they start; then an
    engine connected to them."""
    procs.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--dashboard-address",
                "127.0.0.1:0",
                "--scheduler-file",
                str(sched_file),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    for _ in range(200):
        if sched_file.exists() and sched_file.stat().st_size:
            break
        time.sleep(0.1)
    for host in ("127.0.0.1", "127.0.0.2"):
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    "--scheduler-file",
                    str(sched_file),
                    "--host",
                    host,
                    "--nthreads",
                    "1",
                    "--nworkers",
                    "1",
                    "--no-dashboard",
                    "--name",
                    f"broker-{host}",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    address = json.loads(sched_file.read_text())["address"]
    engine = DaskEngine(scheduler=address, progress=False)
    engine.client.wait_for_workers(2, timeout=60)
    return engine


def test_tasks_run_only_on_the_host_that_owns_the_data(two_host_cluster):
    calls = [StageCall((i,), host) for i in range(12) for host in ("127.0.0.1", "127.0.0.2")]
    outcomes = two_host_cluster.map(PROBE, whoami, calls)
    assert all(o.ok for o in outcomes), [o for o in outcomes if not o.ok][:2]
    for call, outcome in zip(calls, outcomes):
        assert outcome.value.startswith(f"tcp://{call.host}:"), (call.host, outcome.value)


def test_a_host_without_workers_fails_loudly(two_host_cluster):
    start = time.time()
    outcomes = two_host_cluster.map(PROBE, whoami, [StageCall((1,), "127.0.0.3")])
    assert not outcomes[0].ok and time.time() - start < 60
    assert outcomes[0].error_type == "NoValidWorkerError", outcomes[0]


def test_execute_with_two_log_dirs_on_two_hosts(two_host_cluster, tmp_path):
    a = make_broker_logdir(tmp_path / "a", partitions=["plain-v0-1", "gzip-v0-0"], name="kafka-logs-a")
    b = make_broker_logdir(tmp_path / "b", partitions=["lz4-v1-1"], name="kafka-logs-b")
    plan = build_plan(PlanRequest(log_dirs=(str(a), str(b)), host_map=((str(a), "127.0.0.1"), (str(b), "127.0.0.2"))))
    assert [d.host for d in plan.log_dirs] == ["127.0.0.1", "127.0.0.2"]
    report = pipeline.execute(plan, two_host_cluster)
    assert report.ok, report
    assert_scan_agrees(plan, report)
    assert report.totals.verified == plan.estimates.segments
    assert Path(a / "gzip-v0-0" / "00000000000000000000.index").exists()


def where_am_i(seconds: float, driver: int) -> int:
    if os.getpid() == driver:  # only the driver's calls take time: the workers' finish at once when they are up
        time.sleep(seconds)
    return os.getpid()


def test_this_hosts_calls_run_in_the_driver_while_the_local_cluster_starts():
    engine = DaskEngine(n_workers=2, dashboard_address="127.0.0.1:0", progress=False)
    try:
        assert not engine._ready.is_set()  # the cluster starts in the background: nothing waits for it here
        # 100 s of driver work: the workers' start (about 3 s, far more on a loaded machine) ends it long before
        results = engine.map(PROBE, where_am_i, [StageCall((0.25, os.getpid())) for _ in range(400)])
        pids = [r.value for r in results]
        assert all(r.ok for r in results)
        ran_here = pids.count(os.getpid())
        assert 0 < ran_here < len(pids), ran_here  # the driver took the first calls, the workers the rest
        assert pids[0] == os.getpid()  # in order: what ran here came first
    finally:
        engine.close()


def _status(engine: DaskEngine) -> dict:
    base = engine.dashboard_link.rsplit("/", 1)[0]
    with urllib.request.urlopen(f"{base}/migration/status.json", timeout=10) as r:
        return json.loads(r.read())


def test_a_plan_done_here_sooner_than_workers_start_starts_none(tmp_path):
    """The default LocalCluster (no --workers) starts its scheduler and dashboard, and its worker processes only for
    a plan worth them: these fixtures (about a megabyte) run in the driver, and the migration page still shows the
    plan and every segment, from the events the driver held until the scheduler answered."""
    logdir = make_broker_logdir(tmp_path / "a", partitions=["plain-v0-1", "gzip-v0-0", "lz4-v1-1"])
    plan = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    assert not worth_workers(plan)
    before = set(psutil.Process().children(recursive=True))  # an earlier test's forkserver lives on
    engine = DaskEngine(dashboard_address="127.0.0.1:0", progress=False)
    try:
        report = pipeline.execute(plan, engine)
        assert report.ok, report
        assert_scan_agrees(plan, report)
        assert engine.client.scheduler_info(n_workers=-1)["workers"] == {}
        assert set(psutil.Process().children(recursive=True)) <= before  # no worker process was started
        engine.publish_held_events()
        deadline = time.monotonic() + 30
        while (totals := _status(engine)["totals"])["verified"]["segments"] < plan.estimates.segments:
            assert time.monotonic() < deadline, totals
            time.sleep(0.2)
        assert totals["planned"]["segments"] == plan.estimates.segments
        assert totals["swapped"]["segments"] == plan.estimates.segments
    finally:
        engine.close()


def test_a_plan_worth_workers_starts_them_and_shares_the_calls_with_them(tmp_path):
    """A plan estimated at more than about a second of this process's work starts one worker per core but one: the
    driver works on the last core, taking calls from the queue the workers are fed from, each call once."""
    logdir = make_broker_logdir(tmp_path / "a", partitions=["plain-v0-1"])
    plan = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    heavy = dataclasses.replace(plan, estimates=dataclasses.replace(plan.estimates, bytes=int(10e9)))
    assert worth_workers(heavy) and not worth_workers(plan)
    engine = DaskEngine(dashboard_address="127.0.0.1:0", progress=False)
    try:
        first = engine.map(PROBE, pid_of, [StageCall((), plan=heavy)])
        engine.start_workers(wait=True)  # started by the map above: this only waits
        assert len(engine.client.scheduler_info(n_workers=-1)["workers"]) == max(1, (os.cpu_count() or 1) - 1)
        # each worker imported the stages while it started, not in its first task (first: a function of this module
        # run there would import them, through this module's imports)
        assert all(engine.client.run(lambda: "migrate.stages.convert" in sys.modules).values())
        # Dask's own periodic work runs at LOCAL_CLUSTER_PERIODS in the scheduler and in each worker
        assert engine.cluster.scheduler.periodic_callbacks["tick"].callback_time == 500
        assert set(engine.client.run(_periods).values()) == {(500, 100, 1000)}
        later = engine.map(PROBE, slow_pid_of, [StageCall((), plan=heavy) for _ in range(8)])
        assert all(r.ok for r in first + later) and len(later) == 8
        workers = set(engine.client.run(os.getpid).values())
        assert {r.value for r in later} == {os.getpid(), *workers}  # both took calls
    finally:
        engine.close()


def test_whether_workers_are_worth_it_follows_the_plans_bytes_and_digest(tmp_path):
    """The driver alone converts and verifies about 600 MB/s with XXH3-128 digests and half that with SHA-256: a
    450 MB plan starts no workers with the first and starts them with the second."""
    logdir = make_broker_logdir(tmp_path / "a", partitions=["plain-v0-1"])
    plan = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    mid = dataclasses.replace(plan, estimates=dataclasses.replace(plan.estimates, bytes=int(450e6)))
    slow = dataclasses.replace(mid, options=dataclasses.replace(mid.options, digest=DigestAlgorithm.SHA256))
    assert not worth_workers(mid) and worth_workers(slow)


def pid_of(plan: object) -> int:
    return os.getpid()


def slow_pid_of(plan: object) -> int:
    time.sleep(0.3)  # long enough that the driver cannot take every call before a worker is fed one
    return os.getpid()


def _periods(dask_worker) -> tuple[float, float, float]:
    callbacks = dask_worker.periodic_callbacks
    return tuple(callbacks[name].callback_time for name in ("tick", "profile", "monitor"))


def test_a_period_the_operator_configured_is_kept():
    shipped = dask.config.merge(*dask.config.defaults)
    defaults = {key: dask.config.get(key, config=shipped) for key in LOCAL_CLUSTER_PERIODS}
    with dask.config.set(defaults):
        assert _local_cluster_periods() == LOCAL_CLUSTER_PERIODS
        with dask.config.set({"distributed.admin.tick.interval": "50ms"}):
            assert _local_cluster_periods() == {
                "distributed.admin.system-monitor.interval": "1s",
                "distributed.worker.profile.interval": "100ms",
            }


def test_workers_that_do_not_start_are_reported_as_what_to_do_not_as_a_bug():
    from migrate.engines.dask import _not_started
    from migrate.errors import MigrateError

    cause = RuntimeError("Nanny failed to start")
    error = _not_started(cause, "the 2 Dask worker(s) did not start")
    assert isinstance(error, MigrateError) and error.__cause__ is cause
    assert str(error).startswith("the 2 Dask worker(s) did not start: RuntimeError: Nanny failed to start.")
    assert "--engine serial" in str(error) and "bug" not in str(error)
    interrupt = KeyboardInterrupt()
    assert _not_started(interrupt, "x") is interrupt  # Ctrl-C stays Ctrl-C: exit 130, not an error


@pytest.mark.parametrize("started", ["dashboard asked", "workers given"])
def test_the_dashboard_is_told_before_the_first_segment_is_converted(tmp_path, started):
    """A small plan with ``--dashboard``, or with ``--workers``: the cluster's address reaches ``on_ready`` (the CLI's
    "Dask dashboard:" line) before any segment is converted, not after the run, when nothing is left to watch."""
    logdir = make_broker_logdir(tmp_path / "a", partitions=["plain-v0-1", "gzip-v0-0", "lz4-v1-1"])
    plan = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    assert not worth_workers(plan)
    fed: list[object] = []
    told: list[tuple[int, str]] = []
    engine = DaskEngine(
        dashboard_address="127.0.0.1:0",
        progress=False,
        on_segment=fed.append,
        on_ready=lambda e: told.append((len(fed), e.dashboard_link)),
        **({"dashboard": True} if started == "dashboard asked" else {"n_workers": 2}),
    )
    try:
        report = pipeline.execute(plan, engine)
        assert report.ok, report
    finally:
        engine.close()
    assert len(fed) >= plan.estimates.segments
    assert len(told) == 1 and told[0][0] == 0, told
    assert told[0][1].startswith("http://127.0.0.1:") and told[0][1].endswith("/status")


def test_a_small_plan_that_did_not_ask_starts_no_cluster_not_even_at_close(tmp_path):
    logdir = make_broker_logdir(tmp_path / "a", partitions=["plain-v0-1", "gzip-v0-0"])
    plan = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    told: list[DaskEngine] = []
    engine = DaskEngine(dashboard_address="127.0.0.1:0", progress=False, on_ready=told.append)
    report = pipeline.execute(plan, engine)
    engine.close()
    assert report.ok, report
    assert told == [] and engine.cluster is None and engine._client is None and not engine._ready.is_set()


SLEEPY_PRELOAD = "import time\ntime.sleep(600)  # a worker that never arrives\n"


def test_close_does_not_wait_for_workers_that_never_arrive(tmp_path):
    """The run is done before the workers it started are up (here they never come): close stops them at once, not
    after Dask's 120 s wait for them."""
    logdir = make_broker_logdir(tmp_path / "a", partitions=["plain-v0-1"])
    plan = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    preload = tmp_path / "sleepy_preload.py"
    preload.write_text(SLEEPY_PRELOAD)
    with dask.config.set({"distributed.worker.preload": [str(preload)]}):
        engine = DaskEngine(dashboard_address="127.0.0.1:0", progress=False, dashboard=True)
        try:
            report = pipeline.execute(plan, engine)
            assert report.ok, report
            assert engine.client.scheduler_info(n_workers=-1)["workers"] == {}  # started, not arrived
        finally:
            began = time.monotonic()
            engine.close()
    assert time.monotonic() - began < 15


CLOSE_WITH_STARTING_WORKERS = """
import sys
from pathlib import Path

import dask
from kafka_layout import make_broker_logdir

from migrate import pipeline
from migrate.engines.dask import DaskEngine
from migrate.planning.plan import build_plan
from migrate.planning.request import PlanRequest

tmp = Path(sys.argv[1])
plan = build_plan(PlanRequest(log_dirs=(str(make_broker_logdir(tmp / "a", partitions=["plain-v0-1"])),)))
with dask.config.set({"distributed.worker.preload": [sys.argv[2]]}):
    engine = DaskEngine(dashboard_address="127.0.0.1:0", progress=False, dashboard=True)
    report = pipeline.execute(plan, engine)
    engine.close()
print("ok" if report.ok else "not ok")
"""


def test_the_end_of_workers_stopped_while_starting_is_not_told_as_a_failure(tmp_path):
    """Workers still starting when the run is over are stopped: their nannies' "failed to start" (a Tornado error
    and its two tracebacks, printed after the run's last line, and again as the process exited after a second
    Ctrl-C) is the close's own doing, not a fault, and reaches no terminal."""
    preload = tmp_path / "sleepy_preload.py"
    preload.write_text(SLEEPY_PRELOAD)
    tests = Path(__file__).parent
    ran = subprocess.run(
        [sys.executable, "-c", CLOSE_WITH_STARTING_WORKERS, str(tmp_path), str(preload)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tests.parent,
        env={**os.environ, "PYTHONPATH": str(tests)},
    )
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran
    assert "Traceback" not in ran.stderr and "failed to start" not in ran.stderr, ran.stderr


def test_close_is_bounded_and_says_what_it_left_behind(tmp_path, capsys):
    """A scheduler whose event loop is held up (a dashboard page polling it while it closes did that for minutes)
    keeps close no longer than its timeout, and the terminal says what was left to stop with the process."""
    from prometheus_client import REGISTRY

    engine = DaskEngine(dashboard_address="127.0.0.1:0", progress=False, dashboard=True)
    engine.map(PROBE, pid_of, [StageCall((), plan=None)])
    assert engine.cluster is not None
    cluster, plugin = engine.cluster, engine._local_plugin()
    assert plugin.collector is not None
    cluster.scheduler.loop.add_callback(time.sleep, 8)  # what a handler that does not yield does
    began = time.monotonic()
    engine.close(timeout=2)
    assert time.monotonic() - began < 10
    err = capsys.readouterr().err
    assert "the Dask cluster did not close within 2 s" in err and "its scheduler" in err, err
    assert "left to stop when this process exits" in err
    # its metrics gave way at once (a later cluster of this process exports its own), and once its loop is free it
    # closes by itself: nothing of it is left for the tests after this one
    assert plugin.collector is None and not any(
        type(c).__name__ == "MigrationCollector" for c in REGISTRY._collector_to_names
    )
    deadline = time.monotonic() + 60
    while cluster.status.name != "closed":
        assert time.monotonic() < deadline, cluster.status
        time.sleep(0.2)


def test_a_task_key_names_its_function_and_a_survey_is_never_merged_with_another(tmp_path):
    """Dask answers a submit whose key it still holds with the old task's result: a rolling run's release wait,
    asked with the same arguments as the refusal check just before it, got that check's empty tuple under load
    ("0 log dir(s) released"), and each poll of the wait could get the first poll's answer. A key names the
    function, and two surveys never share one; the same conversion submitted again keeps its key."""
    from migrate.rolling.broker_host import cut_over_refusals, release_state

    call = StageCall((("/data/kafka",),), host="tls://10.0.0.1:4000")
    refusals, release = _key(Stage.SURVEY, cut_over_refusals, call), _key(Stage.SURVEY, release_state, call)
    assert refusals != release and release != _key(Stage.SURVEY, release_state, call)
    assert release.startswith("survey-") and refusals.startswith("survey-")
    assert _key(Stage.CONVERT, pid_of, call, 3) == _key(Stage.CONVERT, pid_of, call, 3)
    assert _key(Stage.CONVERT, pid_of, call, 3) != _key(Stage.CONVERT, release_state, call, 3)
    assert _key(Stage.CONVERT, pid_of, call, 3) != _key(Stage.CONVERT, pid_of, call, 4)
