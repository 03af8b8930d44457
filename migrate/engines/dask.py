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
import time
from collections.abc import Callable
from typing import Any

import dask
from distributed import Client, LocalCluster, as_completed

from migrate import monitor, progress
from migrate.engines import CallResult, StageCall
from migrate.model import Plan, SegmentOutcome

NO_WORKERS_TIMEOUT = "60s"
MONITOR = "migrate.monitor"


def _key(stage: str, call: StageCall) -> str:
    """Deterministic per stage, arguments and host; the plan, when it is the first argument, counts by its id."""
    args = call.args
    if call.plan is not None:
        args = (call.plan.plan_id, *args[1:])
    rest = json.dumps([call.host, *args], sort_keys=True, default=str)
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
    name = "dask"

    def __init__(
        self,
        scheduler: str | None = None,
        n_workers: int | None = None,
        dashboard_address: str = "127.0.0.1:8787",
        processes: bool = True,
        progress: bool | None = None,
        on_segment: Callable[[SegmentOutcome], None] | None = None,
        security: Any = None,
    ) -> None:
        """``security``: a distributed.security.Security (TLS) for a remote scheduler; a LocalCluster listens on
        127.0.0.1 only, and its dashboard on ``dashboard_address`` (loopback by default)."""
        routes = dask.config.get("distributed.scheduler.http.routes")
        dask.config.set(
            {
                "distributed.scheduler.no-workers-timeout": NO_WORKERS_TIMEOUT,
                # our /migration page and status.json beside the dashboard of a LocalCluster we start
                "distributed.scheduler.http.routes": [*routes, *([] if MONITOR in routes else [MONITOR])],
            }
        )
        self.cluster = None
        self._dashboard_address = dashboard_address
        if scheduler:
            self.client = Client(scheduler, security=security)
        else:
            self.cluster = LocalCluster(
                n_workers=n_workers or os.cpu_count() or 1,
                threads_per_worker=1,
                processes=processes,
                host="127.0.0.1",
                dashboard_address=dashboard_address,
            )
            self.client = Client(self.cluster)
        self.client.register_plugin(monitor.MigrationPlugin(), name=monitor.PLUGIN_NAME)  # idempotent: see the class
        # a LocalCluster's workers print on our terminal: their records come here instead (a remote one keeps its own)
        self.client.register_plugin(monitor.ForwardWorkerLogs(silence=self.cluster is not None))
        self.client.subscribe_topic(monitor.LOG_TOPIC, monitor.reemit_worker_log)
        self._topics = [monitor.LOG_TOPIC]
        if on_segment is not None:
            self.client.subscribe_topic(monitor.SEGMENT_TOPIC, lambda event: on_segment(monitor.outcome_of(event[1])))
            self._topics.append(monitor.SEGMENT_TOPIC)
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._scattered: dict[str, Any] = {}

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
        host = self._dashboard_address.rsplit(":", 1)[0]
        if self.cluster is not None and host:
            return f"http://{host}:{self.cluster.scheduler.http_server.port}/status"
        return self.client.dashboard_link

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
        futures = []
        for call in calls:
            futures.append(
                self.client.submit(
                    _on_worker,
                    fn,
                    *self._shared(call),
                    key=_key(stage, call),
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
        # no progress line or log record after the report; a remote cluster's workers stop forwarding to us
        with contextlib.suppress(Exception):  # a scheduler already gone must not keep us from closing
            for topic in self._topics:
                self.client.unsubscribe_topic(topic)
            if self.cluster is None:
                self.client.unregister_worker_plugin(monitor.ForwardWorkerLogs.name)
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
