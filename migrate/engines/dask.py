"""Run the stages on Dask: futures, one per task group, pinned to the host that owns the data.

Task keys are ``<stage>-<hash of plan id and arguments>``: deterministic, so the dashboard and Prometheus show one
series per stage (convert-, verify-, swap-) and resubmitting the same work is recognised. Tasks restricted to a
host that has no worker fail after ``no-workers-timeout`` instead of waiting forever.

A LocalCluster (the default, no number of workers given) starts its scheduler, dashboard and worker processes
only for a plan whose work is worth them (``worth_workers``), or when asked for its client: a plan this process
finishes in about the time workers take to start runs here and never starts them. Its workers are one per core
but one, and this process works on the last core for the whole run (``DaskEngine._share``): it takes calls from
the queue the workers are fed from, so one core converts while the workers start, and every core converts once
they are up, with no two processes on one core. A number of workers given starts them at once, and only they work.

Watching (``migrate.watch``): workers publish each finished segment, and what each stage call changed, to the
scheduler's event log, where ``MigrationPlugin`` turns them into the /migration page, status.json and Prometheus
metrics; ``on_segment`` (the command line's progress lines) is told each of them by that plugin where the scheduler
runs in this process (a LocalCluster), else through a subscription of this client to the same events. Warnings and
errors of the workers (Dask's "Compute Failed" among them) reach this client as events too and go to its loggers,
which the command line points at the run log, so a LocalCluster's workers print nothing between the tool's messages.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import multiprocessing.forkserver
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migrate.engines import CallResult, Fold, StageCall, closing
from migrate.errors import MigrateError
from migrate.format import accel
from migrate.model.plan_tree import DigestAlgorithm, Plan
from migrate.model.run_state import Stage
from migrate.run import faults
from migrate.watch import events, progress, runlog

if TYPE_CHECKING:  # imported where a cluster starts: ``distributed`` is about 0.5 s of imports a small plan skips
    from distributed import Client, LocalCluster

NO_WORKERS_TIMEOUT = "60s"
# how long ``close`` waits for the client and a LocalCluster to close: they close in well under a second when nothing
# holds the scheduler's event loop up
CLOSE_SECONDS = 20.0
MONITOR = "migrate.monitor"
# What this process does alone, measured on a 2-core VM (benchmarks/bench_end_to_end.py): convert + verify at about
# 600 MB/s with XXH3-128 digests and 290 MB/s with SHA-256, and about 3 ms of file work per segment (staging, swap;
# benchmarks/bench_scale.py); a LocalCluster's workers take 1.5-2.5 s to start, and meanwhile
# take both cores from the driver. Below this estimate workers would come up when the work is done: plan + execute
# of one 450 MB partition (API, one process, XXH3-128) took 2.93-3.33 s without workers and 3.26-3.86 s with them
# (six runs each), of a 750 MB one 3.44-4.26 s and 4.02-4.80 s (three each).
LOCAL_BYTES_PER_SECOND = {DigestAlgorithm.XXH3_128: 600e6, DigestAlgorithm.SHA256: 290e6}
LOCAL_SECONDS_PER_SEGMENT = 0.003
LOCAL_SECONDS_PER_TAKEN = 0.0001  # a staged segment taken by a cut-over (bench_cutover_many.py, serial: ~90 us)
LOCAL_SECONDS_WORTH_WORKERS = 1.0
# Dask's own periodic work in each process of a LocalCluster (the driver holds the scheduler and one nanny per
# worker): an event-loop tick every 20 ms in each of them, a stack sample every 10 ms in each worker (the dashboard's
# Profile page), psutil every 500 ms. Idle, that was 0.11-0.14 of a core on a 2-core VM, taken from the workers once
# both cores convert; at these rates 0.03-0.04 (10 s of os.times() in each process). The Profile page, the System
# page and the warning about a blocked event loop all still work, at a coarser grain. A value the operator set (a
# Dask config file or a DASK_* variable) is kept.
LOCAL_CLUSTER_PERIODS = {
    "distributed.admin.tick.interval": "500ms",
    "distributed.admin.system-monitor.interval": "1s",
    "distributed.worker.profile.interval": "100ms",
}
# Every batched stream of Dask (a worker's to the scheduler, the scheduler's to each client) keeps its last
# ``low-level-log-length`` payloads for debugging, and the scheduler keeps as many events of each topic: 1000 by
# default. Our segment events are batches of up to 256 segments (about 1 KB each once unpacked), so a worker kept
# about 1 KB per segment it converted, and the driver as much again (the scheduler's stream to this client, which
# receives every segment event), up to a quarter of a million segments: what grew per segment in both after execute
# stopped keeping a record per segment itself. A few payloads still tell a stream's last words; a value
# the operator set is kept, as the periods above.
LOCAL_CLUSTER_LOGS = {"distributed.admin.low-level-log-length": 16}
# what a worker of a LocalCluster imports while it starts (every stage, through the pipeline that names them): about
# 0.15 s of imports that its first task paid otherwise, on both cores at once at the start of a run
WORKER_PRELOAD = "migrate.pipeline"
# the package's own switches, read by worker code: see _worker_environment
SWITCHES = (faults.CRASH_ENV, faults.FAIL_ENV, faults.TRACE_ENV, accel.ENV_VAR)


def _worker_environment() -> dict[str, str]:
    """The package's switches as this process has them now, for the workers of a LocalCluster. They fork from
    Python's forkserver, which this process starts once and which keeps the environment of that moment; so every
    switch is passed explicitly, an unset one as "" (which the package reads as unset), or a worker would keep one
    an earlier cluster of this process had (the test suite's fault injection) or miss one set since."""
    names = {*SWITCHES, *(k for k in os.environ if k.startswith("KAFKA_LOG_MIGRATE_"))}
    return {name: os.environ.get(name, "") for name in sorted(names)}


def _local_cluster_periods() -> dict[str, str]:
    """``LOCAL_CLUSTER_PERIODS`` but for those the operator configured (whatever differs from Dask's own default)."""
    return _unless_configured(LOCAL_CLUSTER_PERIODS)


def _unless_configured(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` but for those the operator configured (whatever differs from Dask's own default)."""
    import dask

    shipped = dask.config.merge(*dask.config.defaults)
    return {
        key: value for key, value in settings.items() if dask.config.get(key) == dask.config.get(key, config=shipped)
    }


def _worker_preload() -> list[str]:
    """The operator's worker preloads (Dask's ``distributed.worker.preload``), then ``WORKER_PRELOAD``. In the worker,
    not in the forkserver it forks from: there the package would keep the switches (``accel``) of that moment."""
    import dask

    return [*dask.config.get("distributed.worker.preload"), WORKER_PRELOAD]


def _forkserver_deaf_to_ctrl_c() -> None:
    """Start the forkserver a LocalCluster's workers fork from with SIGINT ignored, so that they inherit it ignored.

    A terminal sends Ctrl-C's SIGINT to its whole foreground process group, which holds those workers: they died
    mid-task or mid-start with tracebacks of their own, and the driver waited out Dask's 120 s for workers that would
    never arrive. The driver alone owns Ctrl-C: it stops the run (every partition is left wholly old or wholly new, as
    after any crash) and closes the cluster, which stops the workers. A process started with SIGINT ignored keeps it
    ignored (CPython installs its KeyboardInterrupt handler only over the default), and the forkserver gives its
    children the disposition it started with. Only the main thread may set a handler: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def _not_started(exc: BaseException, what: str) -> BaseException:
    """What to tell the operator when the cluster or its workers do not come up (a worker killed while starting, no
    memory, a port taken): not a bug report, but what happened and what to do. An interrupt or a refusal stays what
    it is."""
    if isinstance(exc, (KeyboardInterrupt, MigrateError)) or not isinstance(exc, Exception):
        return exc
    error = MigrateError(
        f"{what}: {type(exc).__name__}: {exc}. Nothing was left half done (every partition is wholly old or wholly "
        "new); the run log has Dask's own messages. Check the host's memory (dmesg for the OOM killer) and run the "
        "same command again, or run it with --engine serial, which needs no workers."
    )
    error.__cause__ = exc
    return error


def _process_workers() -> dict[str, Any]:
    """LocalCluster arguments for worker processes: loopback only, this process's switches, the package imported."""
    return {"host": "127.0.0.1", "env": _worker_environment(), "preload": _worker_preload()}


def _key(stage: Stage, fn: Callable[..., Any], call: StageCall, position: int = 0) -> str:
    """Deterministic per stage, function, arguments, host and position in the map (equal calls must stay distinct
    tasks: Dask merges tasks with one key, and a key still held by the scheduler answers a new submit with the old
    task's result); the plan counts by its id. A survey looks at what is there now (a lock's holder, a marker, the
    refusals of a broker that is stopping): two surveys are never the same work, so each has a key of its own."""
    args = call.args if call.plan is None else (call.plan.plan_id, *call.args)
    name = f"{fn.__module__}.{fn.__qualname__}" if hasattr(fn, "__qualname__") else repr(fn)
    rest = json.dumps([name, call.host, position, *args], sort_keys=True, default=str)
    once = f"-{uuid.uuid4().hex[:12]}" if stage == Stage.SURVEY else ""
    return f"{stage.value}-{hashlib.sha1(rest.encode()).hexdigest()[:16]}{once}"


def worth_workers(plan: Plan) -> bool:
    """Whether a LocalCluster should start its workers for ``plan``: whether this process alone would take longer
    than about a worker start-up (``LOCAL_SECONDS_WORTH_WORKERS``) over the plan's bytes and segments."""
    work = _work_of(plan)
    local = (
        work.converted_bytes / LOCAL_BYTES_PER_SECOND[plan.options.digest]
        + work.converted_segments * LOCAL_SECONDS_PER_SEGMENT
        + work.taken_segments * LOCAL_SECONDS_PER_TAKEN
    )
    return local > LOCAL_SECONDS_WORTH_WORKERS


@dataclass(frozen=True)
class _Work:
    converted_bytes: int
    converted_segments: int
    taken_segments: int  # planned from pre-staging: judged by stat and taken by a rename, not converted


_CUTOVER_WORK: dict[str, _Work] = {}  # plan id -> its work, for the plans of a cut-over


def _work_of(plan: Plan) -> _Work:
    """What ``plan`` converts and what it takes: a cut-over's segments planned from pre-staging
    (``SegmentPlan.staged``) cost a stat and a few renames each, not a conversion. Counting them as converted
    started a LocalCluster's workers for a cut-over of 27 MB beside 2.7 GB taken, and their start took both cores
    from the window's delta conversion (benchmarks/bench_cutover.py). Summed once per plan: ``map`` asks for every
    call."""
    if not any(d.staging_dir for d in plan.log_dirs):
        return _Work(plan.estimates.bytes, plan.estimates.segments, 0)
    if plan.plan_id not in _CUTOVER_WORK:
        converted = [s.size for d in plan.log_dirs for p in d.partitions for s in p.segments if not s.staged]
        _CUTOVER_WORK[plan.plan_id] = _Work(sum(converted), len(converted), plan.estimates.segments - len(converted))
    return _CUTOVER_WORK[plan.plan_id]


def converted_bytes(plan: Plan) -> int:
    """The bytes ``plan`` converts (a cut-over's taken segments not among them)."""
    return _work_of(plan).converted_bytes


def _on_worker(stage: Stage, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a stage on a worker, publishing each finished segment to the scheduler's event log as it happens, and
    what the call changed once it returns."""
    from distributed import get_worker

    worker = get_worker()
    plan = args[0] if args and isinstance(args[0], Plan) else None
    batcher = events.SegmentBatcher()

    def sink(o: progress.Event) -> None:
        batch = batcher.add(events.segment_event(o, plan))
        if batch is not None:
            worker.log_event(events.SEGMENTS_TOPIC, batch)

    previous = progress.set_sink(sink)
    try:
        value = fn(*args)
    finally:
        progress.set_sink(previous)
        batch = batcher.flush()
        if batch is not None:
            worker.log_event(events.SEGMENTS_TOPIC, batch)
    if plan is not None:
        event = events.stage_event(plan, stage, value)
        if event is not None:
            worker.log_event(events.STAGE_TOPIC, events.encode(event))
    return value


def _result_of(future: Any) -> CallResult:
    if future.status == "finished":
        return CallResult(True, future.result())
    exc = future.exception()
    return CallResult(False, error=str(exc), error_type=type(exc).__name__)


def _kept(fold: Fold | None, index: int, r: CallResult) -> CallResult:
    return r if fold is None else fold(index, r)


class DaskEngine:
    """Stages on a Dask cluster. A LocalCluster's scheduler and workers start in the background once a plan is
    worth them (``worth_workers``, or ``start_workers``); calls whose data is on this host run here too, before and
    while the workers are up (``_share``), so their start-up costs no wall time when there is work to do meanwhile,
    and none at all for a plan that is done sooner; their progress events reach the scheduler's page once it is up.
    With a number of workers given, calls run here only until the workers answer."""

    name = "dask"
    run_here_while_starting = True  # tests that need a call to fail on a worker turn it off

    def __init__(
        self,
        scheduler: str | None = None,
        n_workers: int | None = None,
        dashboard_address: str = "127.0.0.1:8787",
        processes: bool = True,
        progress: bool | None = None,
        on_segment: Callable[[progress.Event], None] | None = None,
        security: Any = None,
        on_ready: Callable[[DaskEngine], None] | None = None,
        dashboard: bool = False,
    ) -> None:
        """``security``: a distributed.security.Security (TLS) for a remote scheduler; a LocalCluster listens on
        127.0.0.1 only, and its dashboard on ``dashboard_address`` (loopback by default). ``on_ready`` is called
        once the cluster answers, in the thread that maps, before the first stage that reads or writes segment data
        (the CLI prints the dashboard's address then). ``dashboard``: start a LocalCluster (its scheduler, dashboard
        and workers) with the first map whatever the plan's size, as if it were worth workers."""
        self.cluster: LocalCluster | None = None
        self._dashboard_asked = dashboard
        self._told_ready = False
        self._publish_lock = threading.Lock()
        self._client: Client | None = None
        self._dashboard_address = dashboard_address
        self._on_segment = on_segment
        self._on_ready = on_ready
        self._topics: list[str] = []
        self._held_events: list[tuple[str, Any]] = []  # from calls run here, until the scheduler is up
        self._held_segments: list[events.SegmentFinished] = []  # of the call running here, batched when it ends
        # the batches of calls run here carry it: they come back from the scheduler's page to this client's
        # subscription, told to on_segment already, and are dropped there undecoded
        self._origin = f"client-{uuid.uuid4().hex}"
        self._plans_run_here: dict[str, Plan] = {}  # announced to the scheduler's page with them
        self._ready = threading.Event()  # the scheduler answers (and, for a remote one, its workers)
        self._workers_up = threading.Event()  # a LocalCluster's workers answer
        self._workers_start: threading.Thread | None = None
        self._others_workers: set[int] = set()  # pids of Dask worker processes before this engine asked for its own
        # worker processes as many as cores but one, when a plan is worth them: this process works beside them on the
        # last core (``_share``), from the first second; as many as asked for, at once, and only they work
        self._workers_on_demand = scheduler is None and processes and n_workers is None
        # a LocalCluster of worker processes answers (and shows its dashboard) before its workers: they are added
        # once its scheduler is up, so that the dashboard's address can be told before the first byte is converted
        # without waiting for them
        self._workers_added = scheduler is None and processes
        self.shares_files = scheduler is None  # a LocalCluster's workers, or this process
        self._driver_works = self._workers_on_demand
        cores = os.cpu_count() or 1
        self._n_workers = n_workers or (max(1, cores - 1) if self._workers_on_demand else cores)
        self._start_error: BaseException | None = None
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._scattered: dict[str, Any] = {}
        self._announced: set[str] = set()
        # a LocalCluster started on demand starts its scheduler and dashboard with the first plan worth workers, or
        # when asked for (``client``): a plan this process finishes alone in about a second never starts one
        self._begin_later: Callable[[], None] | None = None
        self._begin_lock = threading.Lock()
        if scheduler:

            def remote() -> Client:
                from distributed import Client

                self._configure(local=False)
                return Client(scheduler, security=security)

            self._start(remote, remote=True)
        else:
            if processes and not self._workers_on_demand:
                _forkserver_deaf_to_ctrl_c()  # on demand: when the workers start (a small plan never forks one)

            def local() -> LocalCluster:
                from distributed import LocalCluster

                self._configure(local=True)
                return LocalCluster(
                    n_workers=0 if processes else self._n_workers,
                    threads_per_worker=1,
                    processes=processes,
                    # process workers listen on loopback only; in-process ones have no listener (inproc://) to bind
                    **(_process_workers() if processes else {}),
                    dashboard_address=dashboard_address,
                )

            if processes:
                self._begin_later = lambda: threading.Thread(
                    target=self._start, args=(local, False), name="dask-start", daemon=True
                ).start()
                if not self._workers_on_demand:
                    self.start_workers()
            else:  # in-process workers talk over an in-process transport that must be set up by this thread
                self._start(local, remote=False)

    @staticmethod
    def _configure(local: bool) -> None:
        """Dask's settings for our clusters, set where a cluster starts (importing ``distributed`` loads its defaults,
        which these extend); for a LocalCluster we start, also its periods (before the cluster: its workers get this
        process's config)."""
        import dask
        import distributed  # noqa: F401  (its configuration defaults)

        runlog.adopt_new_loggers()  # its import gave its loggers terminal handlers
        closing.quiet_cluster_logs(False)  # a cluster of this run speaks, whatever an earlier one's end silenced

        routes = dask.config.get("distributed.scheduler.http.routes")
        dask.config.set(
            {
                "distributed.scheduler.no-workers-timeout": NO_WORKERS_TIMEOUT,
                # our /migration page and status.json beside the dashboard of a LocalCluster we start
                "distributed.scheduler.http.routes": [*routes, *([] if MONITOR in routes else [MONITOR])],
                # a LocalCluster's workers fork from one small server process instead of each starting a fresh
                # interpreter ("spawn"): their start-up took both cores for about 1.5 s, while the driver converts;
                # the forkserver is single-threaded, so forking it is safe. It is started bare (by
                # _forkserver_deaf_to_ctrl_c, before Dask would set its preload), so each worker imports Dask
                # itself: preloading Dask there saved about 0.1 s of a one-segment run's start-up but kept 50-60 MB
                # more resident beside the workers, which put a run of 10^5 tiny segments over its 400 MB
                # (benchmarks/bench_million.py)
                "distributed.worker.multiprocessing-method": "forkserver",
            }
        )
        if local:
            dask.config.set({**_local_cluster_periods(), **_unless_configured(LOCAL_CLUSTER_LOGS)})

    def _begin(self) -> None:
        """Start the LocalCluster's scheduler (in the background, once), if it waits for a reason to."""
        with self._begin_lock:
            begin, self._begin_later = self._begin_later, None
        if begin is not None:
            begin()

    @property
    def _begun(self) -> bool:
        return self._begin_later is None

    def _start(self, make: Callable[[], Any], remote: bool) -> None:
        try:
            from distributed import Client

            from migrate.watch.plugin import PLUGIN_NAME, MigrationPlugin
            from migrate.watch.worker_logs import ForwardWorkerLogs, reemit_worker_log

            if remote:
                client = make()
            else:
                self.cluster = make()
                client = Client(self.cluster)
            client.register_plugin(MigrationPlugin(), name=PLUGIN_NAME)  # idempotent: see the class
            # a LocalCluster's workers print on our terminal: their records come here instead
            client.register_plugin(ForwardWorkerLogs(silence=not remote))
            client.subscribe_topic(events.LOG_TOPIC, reemit_worker_log)
            self._topics = [events.LOG_TOPIC]
            if self._on_segment is not None:
                plugin = self._local_plugin()
                if plugin is not None:  # the scheduler is in this process: its plugin tells on_segment directly
                    plugin.forward_segments(self._on_segment, skip_origin=self._origin)
                else:
                    client.subscribe_topic(events.SEGMENTS_TOPIC, self._segment_events)
                    self._topics.append(events.SEGMENTS_TOPIC)
            self._client = client
            if not self._workers_added:  # up with the cluster (remote: they are the cluster's business)
                self._workers_up.set()
        except BaseException as exc:  # reported by the first call that needs the cluster
            self._start_error = _not_started(exc, "the Dask cluster did not start")
            self._workers_up.set()
        finally:
            self._ready.set()
        if self._start_error is not None and threading.current_thread() is threading.main_thread():
            raise self._start_error
        if threading.current_thread() is threading.main_thread():  # started here (a remote or in-process cluster)
            self._tell_ready()

    def _tell_ready(self) -> None:
        """``on_ready``, once, when the cluster answers; in the caller's thread, so that what it prints comes before
        what the caller does next."""
        if self._told_ready or self._client is None:
            return
        self._told_ready = True
        if self._on_ready is not None:
            self._on_ready(self)

    def start_workers(self, wait: bool = False) -> None:
        """Start a LocalCluster's workers (once; nothing to do for a remote cluster), and with ``wait`` wait until
        they answer."""
        self._begin()
        if self._workers_start is None and not self._workers_up.is_set():
            if self._workers_on_demand:
                # started now, not with the scheduler: the server imports Dask, a core's worth of work for about a
                # second that a plan run without workers does not need
                _forkserver_deaf_to_ctrl_c()
            self._others_workers = closing.worker_processes()
            self._workers_start = threading.Thread(target=self._scale_up, name="dask-workers", daemon=True)
            self._workers_start.start()
        if wait:
            self._workers_up.wait()
            if self._start_error is not None:
                raise self._start_error

    def _scale_up(self) -> None:
        try:
            client = self.client
            assert self.cluster is not None
            self.cluster.scale(self._n_workers)
            client.wait_for_workers(self._n_workers, timeout=120)
        except BaseException as exc:  # reported by the first call that needs the workers
            self._start_error = _not_started(exc, f"the {self._n_workers} Dask worker(s) did not start")
        finally:
            self._workers_up.set()

    @property
    def client(self) -> Client:
        self._begin()
        self._ready.wait()
        if self._start_error is not None:
            raise self._start_error
        assert self._client is not None
        return self._client

    def _shared(self, call: StageCall) -> tuple[Any, ...]:
        """The plan is sent to the workers once, not with every task."""
        plan: Plan | None = call.plan
        if plan is None:
            return call.args
        if plan.plan_id not in self._scattered:
            self._scattered[plan.plan_id] = self.client.scatter(plan, broadcast=True, hash=False)
            self._announce(plan)
        return (self._scattered[plan.plan_id], *call.args)

    def _announce(self, plan: Plan) -> None:
        """The plan's totals on the scheduler's page, once per plan."""
        if plan.plan_id not in self._announced:
            self._announced.add(plan.plan_id)
            self.client.log_event(events.PLAN_TOPIC, events.encode(events.plan_event(plan)))

    @property
    def dashboard_link(self) -> str:
        """The dashboard URL; for a LocalCluster bound to one interface, that interface (Dask would name another)."""
        client = self.client  # the cluster has started
        host = self._dashboard_address.rsplit(":", 1)[0]
        scheduler = self.cluster.scheduler if self.cluster is not None else None
        if scheduler is not None and host:
            return f"http://{host}:{scheduler.http_server.port}/status"
        return client.dashboard_link

    @property
    def address(self) -> str:
        scheduler = self.client.scheduler
        if scheduler is None or scheduler.address is None:
            raise MigrateError("the Dask client is closed: it has no scheduler address")
        return str(scheduler.address)

    def workers(self, expect: int = 0, timeout: float = 60.0) -> list[str]:
        """The address of every connected worker (on a cluster: one per broker host), after waiting up to
        ``timeout`` seconds for ``expect`` of them: workers started with the scheduler may still be connecting."""
        self.start_workers(wait=True)
        deadline = time.monotonic() + timeout
        while True:
            found = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
            if len(found) >= expect or time.monotonic() > deadline:
                return found
            time.sleep(0.5)

    @property
    def migration_link(self) -> str:
        """The migration's own page, beside Dask's on the same server."""
        return self.dashboard_link.rsplit("/", 1)[0] + "/migration"

    def map(
        self, stage: Stage, fn: Callable[..., Any], calls: list[StageCall], fold: Fold | None = None
    ) -> list[CallResult]:
        local = self.run_here_while_starting and all(call.host is None for call in calls)
        small = local and all(call.plan is not None and not worth_workers(call.plan) for call in calls)
        if self._dashboard_asked or not small:
            self.start_workers()
        if self._begun and not self._told_ready and (stage != Stage.PREPARE or self._ready.is_set()):
            # the dashboard's address before the first byte is read or written: waiting for the scheduler (about a
            # second, importing Dask) costs the driver that second, and the operator has the page to watch for the
            # whole run, not only after it (the workers still start in the background)
            self._ready.wait()
            self._tell_ready()
            if self._client is not None:  # the plan's totals on the page before its first byte is converted
                for plan in {call.plan.plan_id: call.plan for call in calls if call.plan is not None}.values():
                    self._announce(plan)
        if self._driver_works and self.run_here_while_starting:
            return self._share(stage, fn, calls, fold)
        out: list[CallResult | None] = [None] * len(calls)
        for i, call in enumerate(calls):
            if self._workers_up.is_set() or not self.run_here_while_starting:
                break
            if call.host is None:  # this host's data: run it here until the workers are up
                out[i] = _kept(fold, i, self._run_here(stage, fn, call))
        rest = [i for i, r in enumerate(out) if r is None]
        if rest:
            for i, r in zip(rest, self._submit(stage, fn, [calls[i] for i in rest], rest, fold)):
                out[i] = r
        elif self._ready.is_set():
            self.publish_held_events()
        return [r for r in out if r is not None]

    def _share(
        self, stage: Stage, fn: Callable[..., Any], calls: list[StageCall], fold: Fold | None = None
    ) -> list[CallResult]:
        """The calls of a LocalCluster started on demand, shared between this process and the workers: the driver
        takes the next call whose data is on this host, over and over, while a feeder thread (once workers are up)
        keeps each worker one call ahead from the same queue, so every core converts from the first second to the
        last and no call runs twice. Calls pinned to a host go to the workers only."""
        out: list[CallResult | None] = [None] * len(calls)
        queue = collections.deque(i for i, call in enumerate(calls) if call.host is None)
        pinned = [i for i, call in enumerate(calls) if call.host is not None]
        lock = threading.Lock()

        def take() -> int | None:
            with lock:
                return queue.popleft() if queue else None

        feeder: threading.Thread | None = None
        failure: list[BaseException] = []
        if self._workers_start is not None or pinned:  # workers are (being) started: feed them
            feeder = threading.Thread(
                target=self._feed,
                args=(stage, fn, calls, pinned, take, lambda: bool(queue), out, failure, fold),
                name="dask-feed",
                daemon=True,
            )
            feeder.start()
        while (i := take()) is not None:
            out[i] = _kept(fold, i, self._run_here(stage, fn, calls[i]))
            if self._told_ready:  # the page the operator was pointed at follows the driver's calls as they end
                self.publish_held_events()
        if feeder is not None:
            feeder.join()
        if failure and any(r is None for r in out):
            raise failure[0]
        if self._ready.is_set():
            self.publish_held_events()
        return [r for r in out if r is not None]

    def _feed(
        self,
        stage: Stage,
        fn: Callable[..., Any],
        calls: list[StageCall],
        pinned: list[int],
        take: Callable[[], int | None],
        left: Callable[[], bool],
        out: list[CallResult | None],
        failure: list[BaseException],
        fold: Fold | None = None,
    ) -> None:
        """Submit the pinned calls, then keep each worker one call ahead of its current one (so the scheduler's
        round trip hides behind a call's work), taking calls from the queue the driver also takes from. Waits for
        workers still starting only while there is something for them: the driver may finish the map first."""
        try:
            while not self._workers_up.wait(0.05):
                if not pinned and not left():
                    return
            self.start_workers(wait=True)  # raises why they did not start
            self.publish_held_events()
            ahead = 2 * self._n_workers
            index: dict[str, int] = {}
            from distributed import as_completed

            done = as_completed()

            def submit(i: int) -> None:
                call = calls[i]
                future = self._submit_one(stage, fn, call, i)
                index[future.key] = i
                done.add(future)

            for i in pinned:
                submit(i)
            for _ in range(ahead):
                if (taken := take()) is None:
                    break
                submit(taken)
            for future in done:
                i = index[future.key]
                out[i] = _kept(fold, i, _result_of(future))
                future.release()
                if (nxt := take()) is not None:
                    submit(nxt)
                self.publish_held_events()  # the driver's finished calls, on the page as they come
        except BaseException as exc:  # raised by map once the driver has run what it could
            failure.append(exc)

    def _local_plugin(self) -> Any:
        """The MigrationPlugin of a LocalCluster's scheduler, which runs in this process; None for a remote one."""
        from migrate.watch.plugin import PLUGIN_NAME

        scheduler = getattr(self.cluster, "scheduler", None)
        plugins = getattr(scheduler, "plugins", None)
        return plugins.get(PLUGIN_NAME) if isinstance(plugins, dict) else None

    def _segment_events(self, event: tuple[float, Any]) -> None:
        """Segments or ranges finished on a worker. The batches of calls run here come back to this subscription
        from the scheduler's page too; told already (``_run_here``), they are dropped undecoded."""
        assert self._on_segment is not None
        for o in events.decode_segments(event[1], skip_origin=self._origin):
            self._on_segment(o)

    def _run_here(self, stage: Stage, fn: Callable[..., Any], call: StageCall) -> CallResult:
        plan = call.plan

        def sink(o: progress.Event) -> None:
            if self._on_segment is not None:
                self._on_segment(o)
            self._held_segments.append(events.segment_event(o, plan))

        if plan is not None:
            self._plans_run_here.setdefault(plan.plan_id, plan)
        previous = progress.set_sink(sink)
        try:
            value = fn(*call.arguments())
        except Exception as exc:  # reported per call, as the workers' are
            return CallResult(False, error=str(exc), error_type=type(exc).__name__)
        finally:
            progress.set_sink(previous)
        self._hold_segments()  # before the call's stage event, in the order they happened
        if plan is not None:
            event = events.stage_event(plan, stage, value)
            if event is not None:
                self._held_events.append((events.STAGE_TOPIC, events.encode(event)))
        return CallResult(True, value)

    def _hold_segments(self) -> None:
        """The segments finished here since the last call, as one batch among the held events."""
        if self._held_segments:
            batch = events.SegmentsFinished(tuple(self._held_segments), self._origin)
            self._held_segments = []
            self._held_events.append((events.SEGMENTS_TOPIC, events.encode(batch)))

    def publish_held_events(self) -> None:
        """The events of the calls that ran here, on the scheduler's page (waits for the scheduler to answer; every
        map does it once the scheduler is up, and close does it)."""
        with self._publish_lock:  # the driver and the feeder both publish (``_share``), in the order they happened
            for plan in list(self._plans_run_here.values()):  # the driver may be adding one (``_share``)
                self._announce(plan)
                self._plans_run_here.pop(plan.plan_id, None)
            while self._held_events:
                topic, event = self._held_events.pop(0)
                self.client.log_event(topic, event)

    def _submit_one(self, stage: Stage, fn: Callable[..., Any], call: StageCall, position: int) -> Any:
        """One call as a task on a worker: pinned to its host where it has one, never retried (a stage's failure is
        reported, not repeated)."""
        return self.client.submit(
            _on_worker,
            stage,
            fn,
            *self._shared(call),
            key=_key(stage, fn, call, position),
            workers=[call.host] if call.host else None,
            allow_other_workers=False,
            pure=False,
            retries=0,
        )

    def _submit(
        self,
        stage: Stage,
        fn: Callable[..., Any],
        calls: list[StageCall],
        positions: list[int],
        fold: Fold | None = None,
    ) -> list[CallResult]:
        """``calls`` on the workers; ``positions``: theirs in the map (what ``fold`` is told)."""
        from distributed import as_completed

        self.start_workers(wait=True)
        self.publish_held_events()
        futures = []
        for position, call in enumerate(calls):
            futures.append(self._submit_one(stage, fn, call, position))
        index = {f.key: i for i, f in enumerate(futures)}
        out: list[CallResult] = [CallResult(False)] * len(futures)
        for done, future in enumerate(as_completed(futures), start=1):
            i = index[future.key]
            out[i] = _kept(fold, positions[i], _result_of(future))
            future.release()  # its value, folded, is not kept on the worker until the whole stage is done
            if self.progress:
                print(f"\r{stage.value}: {done}/{len(futures)}", end="", file=sys.stderr, flush=True)
        if self.progress and futures:
            print(file=sys.stderr)
        return out

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Close the client and a LocalCluster, waiting ``timeout`` seconds at most: workers still starting are not
        waited for (the work is done), and a scheduler whose event loop is held up (a dashboard tab polling /status
        while it closes) is left to end with this process, saying so, instead of holding the exit for minutes."""
        if not self._begun:  # never started: the events held are for a page that never was
            with self._begin_lock:
                self._begin_later = None
            return
        closer = threading.Thread(target=self._close, name="dask-close", daemon=True)
        closer.start()
        try:
            closer.join(timeout)
        except KeyboardInterrupt:  # the operator will not wait for it either
            closing.abandon(self.cluster, self._local_plugin())
            raise
        if closer.is_alive():
            starting = self._workers_start is not None and not self._workers_up.is_set()
            runlog.note(closing.left_behind(timeout, self.cluster is not None, self._n_workers if starting else 0))
            closing.abandon(self.cluster, self._local_plugin())

    def _close(self) -> None:
        try:
            self._close_cluster()
        except Exception as exc:  # the run's work and state are on disk: a failed close is the run log's matter
            if (log := runlog.current()) is not None:
                log.exception("closing the Dask cluster failed", exc)

    def _close_cluster(self) -> None:
        self._ready.wait()
        if self._client is not None:
            with contextlib.suppress(Exception):  # the page shows what ran here; a scheduler gone shows nothing
                self.publish_held_events()
        if self._client is None:
            if self.cluster is not None:
                self.cluster.close()
            return
        # no progress line or log record after the report; a remote cluster's workers stop forwarding to us
        with contextlib.suppress(Exception):  # a scheduler already gone must not keep us from closing
            for topic in self._topics:
                self.client.unsubscribe_topic(topic)
            if (plugin := self._local_plugin()) is not None:
                plugin.forward_segments(None)
            if self.cluster is None:
                from migrate.watch.worker_logs import ForwardWorkerLogs

                self.client.unregister_worker_plugin(ForwardWorkerLogs.name)
        with contextlib.suppress(Exception):
            self._client.close()
        if self.cluster is not None:
            if not self._workers_up.is_set():
                closing.stop_starting_workers(self.cluster, self._others_workers)
            self.cluster.close()
