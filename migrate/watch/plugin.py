"""The scheduler plugin that watches a migration: ``MigrationPlugin`` folds the run's events into a ``RunProgress``
per plan and counts the engine's tasks per stage.

Shaped as distributed's own diagnostics: ``log_event`` receives every event of the scheduler's event log, and is the
boundary where the run's events (``migrate.watch.events``) are decoded into their records, once; ``transition``
counts tasks per ``migrate.model.Stage`` (a task key is ``<stage>-<hash>``). The plugin registers its Prometheus
collector (``migrate.watch.prometheus``) when it starts and unregisters it when it closes.

A client in the scheduler's own process (a LocalCluster's driver) hands the plugin its progress sink
(``forward_segments``) instead of subscribing to the segment events: each batch is then decoded once, here, and not
sent back to the same process and decoded again (at 10^5 tiny segments that round trip was about 1.3 s of the
driver's GIL, taken from its share of the conversion).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from migrate import __version__
from migrate.errors import ModelError
from migrate.model.run_state import RangeProgress, SegmentOutcome, Stage
from migrate.watch.events import PlanAnnounced, SegmentsFinished, decode_run_event
from migrate.watch.prometheus import MigrationCollector, register_collector, unregister_collector
from migrate.watch.tally import RunProgress, TaskCounts

logger = logging.getLogger(__name__)

PLUGIN_NAME = "kafka-log-migrate"
_STAGE_OF_NAME = {s.value: s for s in Stage}


def stage_of(key: Any) -> Stage | None:
    """The stage of a task key ``<stage>-<hash>`` (``rollback-check-ab12`` is rollback-check, not rollback); None for
    a key that is not one of ours."""
    name = key if isinstance(key, str) else str(key)
    stage, dash, _ = name.rpartition("-")
    return _STAGE_OF_NAME.get(stage) if dash else None


class MigrationPlugin(SchedulerPlugin):
    """Folds the workers' events into per-plan progress; counts tasks per stage; serves the collector."""

    name = PLUGIN_NAME
    idempotent = True  # a scheduler that already watches (a preload, an earlier run) keeps what it has seen

    def __init__(self) -> None:
        self.runs: dict[str, RunProgress] = {}
        self.current: str | None = None
        self.tasks: dict[Stage, TaskCounts] = {s: TaskCounts() for s in Stage}
        self.scheduler: Any = None
        self.collector: MigrationCollector | None = None
        self._forward: Callable[[SegmentOutcome | RangeProgress], None] | None = None
        self._forward_skip = ""

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.collector = register_collector(self)
        link_from_dask_pages(scheduler)

    async def close(self) -> None:
        if self.collector is not None:
            unregister_collector(self.collector)
            self.collector = None

    def forward_segments(
        self, sink: Callable[[SegmentOutcome | RangeProgress], None] | None, skip_origin: str = ""
    ) -> None:
        """Tell ``sink`` every finished segment or range this plugin folds from now on, but those of batches whose
        origin is ``skip_origin`` (the client's own, told already); None stops. For a client in this process only:
        ``sink`` runs on the scheduler's event loop, as a subscription's handler would."""
        self._forward, self._forward_skip = sink, skip_origin

    def run(self, plan_id: str | None) -> RunProgress:
        plan_id = plan_id or self.current or "unknown"
        run = self.runs.get(plan_id)
        if run is None:
            run = self.runs[plan_id] = RunProgress(plan_id)
        self.current = plan_id
        return run

    def current_run(self) -> RunProgress | None:
        return self.runs.get(self.current) if self.current else None

    def log_event(self, topic: str, msg: Any) -> None:
        try:
            event = decode_run_event(topic, msg)
        except ModelError as exc:
            logger.warning(
                "an event the migration page cannot read was left out of /migration and /metrics: %s. Are the "
                "workers and the client running kafka-log-migrate %s, as this scheduler is?",
                exc,
                __version__,
            )
            return
        if event is None:
            return
        if isinstance(event, PlanAnnounced):
            self.run(event.plan_id).plan(event)
            return
        if isinstance(event, SegmentsFinished):
            forward = self._forward if event.origin != self._forward_skip else None
            for finished in event.events:
                self.run(finished.plan_id).segment(finished)
                if forward is not None:
                    forward(finished.progress)
        else:
            self.run(event.plan_id).stage(event)
        self._forget_retained(topic)

    def _forget_retained(self, topic: str) -> None:
        """Drop the scheduler's own copy of a segment or stage event once folded here. Dask keeps the last
        ``distributed.admin.low-level-log-length`` (1000) events of every topic for ``Client.get_events``; ours
        are batches of up to 256 segments, so that copy held a quarter of a million segments' dicts, about 1 KB
        each, in the scheduler (the driver's own process on a LocalCluster). Subscribers got the event before
        the plugins (``Broker.publish``), and nothing of ours reads it back. Dask has no public call for this:
        a version without its broker keeps the copies, as before."""
        truncate = getattr(getattr(self.scheduler, "_broker", None), "truncate", None)
        if truncate is not None:
            truncate(topic)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        stage = stage_of(key)
        if stage is None or finish not in ("memory", "erred"):
            return
        counts = self.tasks[stage]
        if finish == "memory":
            counts.done += 1
            return
        counts.erred += 1
        if self.current is not None:
            text = kwargs.get("exception_text") or ""
            self.run(self.current).task_failed(stage, str(key), str(text))

    def pending(self) -> dict[Stage, int]:
        out: dict[Stage, int] = {}
        if self.scheduler is None:
            return out
        for key, ts in self.scheduler.tasks.items():
            stage = stage_of(key)
            if stage and ts.state not in ("memory", "erred", "forgotten", "released"):
                out[stage] = out.get(stage, 0) + 1
        return out

    def status(self, partition_limit: int | None = None) -> dict[str, Any]:
        """status.json: the current run's ``RunProgress.status``, and the tasks of every stage."""
        run = self.current_run()
        pending = self.pending()
        return {
            **(run.status(partition_limit) if run else {"plan": None}),
            "stages": {
                s.value: {"done": c.done, "erred": c.erred, "pending": pending.get(s, 0)} for s, c in self.tasks.items()
            },
            "stage": self._stage(run, pending),
            "workers": len(self.scheduler.workers) if self.scheduler is not None else 0,
            "tool_version": __version__,
        }

    @staticmethod
    def _stage(run: RunProgress | None, pending: dict[Stage, int]) -> str | None:
        """The first stage with tasks to run, else what the run's own process is doing (None: nothing)."""
        stage = next((s for s in Stage if pending.get(s)), None) or (run.stage_at_work() if run else None)
        return stage.value if stage is not None else None


def plugin_of(scheduler: Any) -> MigrationPlugin | None:
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    return plugin if isinstance(plugin, MigrationPlugin) else None


def link_from_dask_pages(scheduler: Any) -> None:
    """Put "Migration" in the navigation bar of Dask's own pages (/status, /workers ...). Dask has no API for this:
    its bokeh pages take their links from a list built once per scheduler, which we extend; if a Dask version builds
    it differently, the pages just lack the link (the /migration page links back to /status either way)."""
    try:
        from distributed.dashboard.scheduler import template_variables

        pages = template_variables(scheduler)["pages"]
        if "migration" not in pages:
            pages.append("migration")
    except Exception as exc:  # no bokeh, or another Dask: a missing link is not worth failing a migration
        logger.debug("no link to /migration on Dask's pages: %s", exc)
