"""Run the stages on Dask: futures, one per task group, pinned to the host that owns the data.

Task keys are ``<stage>-<hash of plan id and arguments>``: deterministic, so the dashboard and Prometheus show one
series per stage (convert-, verify-, swap-) and resubmitting the same work is recognised. Tasks restricted to a
host that has no worker fail after ``no-workers-timeout`` instead of waiting forever.

Watching (``migrate.monitor``): workers publish each finished segment, and what each stage call changed, to the
scheduler's event log, where ``MigrationPlugin`` turns them into the /migration page, status.json and Prometheus
metrics; ``on_segment`` subscribes this client to the same events (the command line's progress lines). Warnings and
errors of the workers (Dask's "Compute Failed" among them) reach this client as events too and go to its loggers,
which the command line points at the run log, so a LocalCluster's workers print nothing between the tool's messages.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import dask
from distributed import Client, LocalCluster, as_completed

from migrate import monitor, progress
from migrate.engines import CallResult, StageCall
from migrate.model import Plan

NO_WORKERS_TIMEOUT = "60s"
MONITOR = "migrate.monitor"


def _key(stage: str, call: StageCall, position: int = 0) -> str:
    """Deterministic per stage, arguments, host and position in the map (equal calls must stay distinct tasks:
    Dask merges tasks with one key); the plan, when it is the first argument, counts by its id."""
    args = call.args
    if call.plan is not None:
        args = (call.plan.plan_id, *args[1:])
    rest = json.dumps([call.host, position, *args], sort_keys=True, default=str)
    return f"{stage}-{hashlib.sha1(rest.encode()).hexdigest()[:16]}"


def _on_worker(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a stage on a worker, publishing each finished segment to the scheduler's event log as it happens, and
    what the call changed once it returns."""
    from distributed import get_worker

    worker = get_worker()
    plan = args[0] if args and isinstance(args[0], Plan) else None
    previous = progress.set_sink(lambda o: worker.log_event(monitor.SEGMENT_TOPIC, monitor.segment_event(o, plan)))
    try:
        value = fn(*args)
    finally:
        progress.set_sink(previous)
    if plan is not None:
        event = monitor.stage_event(plan, value)
        if event is not None:
            worker.log_event(monitor.STAGE_TOPIC, event)
    return value


class DaskEngine:
    """Stages on a Dask cluster. A LocalCluster starts in the background: until its workers are up, calls whose
    data is on this host run here, in the driver, so the start-up (about 2.5 s) costs no wall time when there is work
    to do meanwhile; their progress events reach the scheduler's page once it is up."""

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
    ) -> None:
        """``security``: a distributed.security.Security (TLS) for a remote scheduler; a LocalCluster listens on
        127.0.0.1 only, and its dashboard on ``dashboard_address`` (loopback by default). ``on_ready`` is called
        once the cluster answers (the CLI prints the dashboard's address then)."""
        routes = dask.config.get("distributed.scheduler.http.routes")
        dask.config.set(
            {
                "distributed.scheduler.no-workers-timeout": NO_WORKERS_TIMEOUT,
                # our /migration page and status.json beside the dashboard of a LocalCluster we start
                "distributed.scheduler.http.routes": [*routes, *([] if MONITOR in routes else [MONITOR])],
            }
        )
        self.cluster: LocalCluster | None = None
        self._client: Client | None = None
        self._dashboard_address = dashboard_address
        self._on_segment = on_segment
        self._on_ready = on_ready
        self._topics: list[str] = []
        self._held_events: list[tuple[str, Any]] = []  # from calls run here before the scheduler was up
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._scattered: dict[str, Any] = {}
        if scheduler:
            self._start(lambda: Client(scheduler, security=security), remote=True)
        else:
            local = lambda: LocalCluster(  # noqa: E731
                n_workers=n_workers or os.cpu_count() or 1,
                threads_per_worker=1,
                processes=processes,
                # process workers listen on loopback only; in-process ones have no listener (inproc://) to bind
                **({"host": "127.0.0.1"} if processes else {}),
                dashboard_address=dashboard_address,
            )
            if processes:
                threading.Thread(target=self._start, args=(local, False), name="dask-start", daemon=True).start()
            else:  # in-process workers talk over an in-process transport that must be set up by this thread
                self._start(local, remote=False)

    def _start(self, make: Callable[[], Any], remote: bool) -> None:
        try:
            if remote:
                client = make()
            else:
                self.cluster = make()
                client = Client(self.cluster)
            client.register_plugin(monitor.MigrationPlugin(), name=monitor.PLUGIN_NAME)  # idempotent: see the class
            # a LocalCluster's workers print on our terminal: their records come here instead
            client.register_plugin(monitor.ForwardWorkerLogs(silence=not remote))
            client.subscribe_topic(monitor.LOG_TOPIC, monitor.reemit_worker_log)
            self._topics = [monitor.LOG_TOPIC]
            if self._on_segment is not None:
                on_segment = self._on_segment
                client.subscribe_topic(monitor.SEGMENT_TOPIC, lambda event: on_segment(monitor.outcome_of(event[1])))
                self._topics.append(monitor.SEGMENT_TOPIC)
            self._client = client
        except BaseException as exc:  # reported by the first call that needs the cluster
            self._start_error = exc
        finally:
            self._ready.set()
        if self._start_error is not None and threading.current_thread() is threading.main_thread():
            raise self._start_error
        if self._client is not None and self._on_ready is not None:
            self._on_ready(self)

    @property
    def client(self) -> Client:
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
            self.client.log_event(monitor.PLAN_TOPIC, monitor.plan_event(plan))
        return (self._scattered[plan.plan_id], *call.args[1:])

    @property
    def dashboard_link(self) -> str:
        """The dashboard URL; for a LocalCluster bound to one interface, that interface (Dask would name another)."""
        client = self.client  # the cluster has started
        host = self._dashboard_address.rsplit(":", 1)[0]
        if self.cluster is not None and host:
            return f"http://{host}:{self.cluster.scheduler.http_server.port}/status"
        return client.dashboard_link

    @property
    def address(self) -> str:
        return self.client.scheduler.address

    def workers(self, expect: int = 0, timeout: float = 60.0) -> list[str]:
        """The address of every connected worker (on a cluster: one per broker host), after waiting up to
        ``timeout`` seconds for ``expect`` of them: workers started with the scheduler may still be connecting."""
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

    def map(self, stage: str, fn: Callable[..., Any], calls: list[StageCall]) -> list[CallResult]:
        out: list[CallResult | None] = [None] * len(calls)
        for i, call in enumerate(calls):
            if self._ready.is_set() or not self.run_here_while_starting:
                break
            if call.host is None:  # this host's data: run it here while the cluster starts
                out[i] = self._run_here(fn, call)
        rest = [i for i, r in enumerate(out) if r is None]
        if rest:
            self._release_held_events()
            for i, r in zip(rest, self._submit(stage, fn, [calls[i] for i in rest])):
                out[i] = r
        return [r for r in out if r is not None]

    def _run_here(self, fn: Callable[..., Any], call: StageCall) -> CallResult:
        plan = call.plan

        def sink(o: progress.Event) -> None:
            if self._on_segment is not None:
                self._on_segment(o)
            self._held_events.append((monitor.SEGMENT_TOPIC, monitor.segment_event(o, plan)))

        previous = progress.set_sink(sink)
        try:
            value = fn(*call.args)
        except Exception as exc:  # reported per call, as the workers' are
            return CallResult(False, error=str(exc), error_type=type(exc).__name__)
        finally:
            progress.set_sink(previous)
        if plan is not None:
            event = monitor.stage_event(plan, value)
            if event is not None:
                self._held_events.append((monitor.STAGE_TOPIC, event))
        return CallResult(True, value)

    def _release_held_events(self) -> None:
        while self._held_events:
            topic, event = self._held_events.pop(0)
            self.client.log_event(topic, event)

    def _submit(self, stage: str, fn: Callable[..., Any], calls: list[StageCall]) -> list[CallResult]:
        futures = []
        for position, call in enumerate(calls):
            futures.append(
                self.client.submit(
                    _on_worker,
                    fn,
                    *self._shared(call),
                    key=_key(stage, call, position),
                    workers=[call.host] if call.host else None,
                    allow_other_workers=False,
                    pure=False,
                    retries=0,
                )
            )
        index = {f.key: i for i, f in enumerate(futures)}
        out: list[CallResult] = [CallResult(False)] * len(futures)
        for done, future in enumerate(as_completed(futures), start=1):
            i = index[future.key]
            if future.status == "finished":
                out[i] = CallResult(True, future.result())
            else:
                exc = future.exception()
                out[i] = CallResult(False, error=str(exc), error_type=type(exc).__name__)
            if self.progress:
                print(f"\r{stage}: {done}/{len(futures)}", end="", file=sys.stderr, flush=True)
        if self.progress and futures:
            print(file=sys.stderr)
        for f in futures:
            f.release()
        return out

    def close(self) -> None:
        self._ready.wait()
        if self._client is None:
            if self.cluster is not None:
                self.cluster.close()
            return
        # no progress line or log record after the report; a remote cluster's workers stop forwarding to us
        with contextlib.suppress(Exception):  # a scheduler already gone must not keep us from closing
            for topic in self._topics:
                self.client.unsubscribe_topic(topic)
            if self.cluster is None:
                self.client.unregister_worker_plugin(monitor.ForwardWorkerLogs.name)
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
