"""``MigrationCollector``: the migration's Prometheus metrics, built from the plugin's state at each scrape.

As distributed's own collectors are (``distributed.http.scheduler.prometheus``): the plugin registers it in the
default registry, which the scheduler's ``/metrics`` serves, when it starts, and unregisters it when it closes.
Counters of segments, source and output bytes and records by log dir, stage and outcome, and of tasks by stage
(every ``migrate.model.Stage``); gauges of partitions by state, of what was planned, of the current rate and the ETA.
The names are those ``dashboards/`` queries: renaming one breaks the operators' Grafana.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Protocol

from migrate import __version__
from migrate.model.run_state import Stage
from migrate.watch.tally import RATE_WINDOW_SECONDS, Figures, RunProgress, TaskCounts


class WatchedRuns(Protocol):
    """What the collector reads of the scheduler plugin (``migrate.watch.plugin.MigrationPlugin``)."""

    runs: dict[str, RunProgress]
    tasks: dict[Stage, TaskCounts]

    def current_run(self) -> RunProgress | None: ...


logger = logging.getLogger(__name__)


class MigrationCollector:
    """Prometheus metrics built from the plugin's state at each scrape (no counter lives between scrapes)."""

    def __init__(self, plugin: WatchedRuns) -> None:
        self.plugin = plugin

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["log_dir", "stage", "outcome"]
        segments = CounterMetricFamily(
            "kafka_log_migrate_segments", "Segments finished, by log dir, stage and outcome", labels=labels
        )
        source = CounterMetricFamily(
            "kafka_log_migrate_source_bytes",
            "Bytes of the legacy source segments finished, by log dir, stage and outcome",
            labels=labels,
        )
        output = CounterMetricFamily(
            "kafka_log_migrate_output_bytes",
            "Bytes of the converted segments written, by log dir, stage and outcome",
            labels=labels,
        )
        records = CounterMetricFamily(
            "kafka_log_migrate_records",
            "Records of the segments finished, by log dir, stage and outcome",
            labels=labels,
        )
        summed: dict[tuple[str, str, str], Figures] = {}
        for watched in self.plugin.runs.values():  # every run this scheduler watched: counters never go down
            for key, f in watched.figures.items():
                summed.setdefault(key, Figures()).add(f)
        for key, f in sorted(summed.items()):
            segments.add_metric(list(key), f.segments)
            source.add_metric(list(key), f.source_bytes)
            output.add_metric(list(key), f.output_bytes)
            records.add_metric(list(key), f.records)
        yield from (segments, source, output, records)

        tasks = CounterMetricFamily(
            "kafka_log_migrate_tasks", "Engine tasks finished, by stage and final state", labels=["stage", "state"]
        )
        for stage, counts in self.plugin.tasks.items():
            tasks.add_metric([stage.value, "done"], counts.done)
            tasks.add_metric([stage.value, "erred"], counts.erred)
        yield tasks

        run = self.plugin.current_run()
        partitions = GaugeMetricFamily(
            "kafka_log_migrate_partitions",
            "Planned partitions of the current plan, by log dir and state",
            labels=["log_dir", "state"],
        )
        planned_segments = GaugeMetricFamily(
            "kafka_log_migrate_planned_segments", "Segments the current plan converts, by log dir", labels=["log_dir"]
        )
        planned_bytes = GaugeMetricFamily(
            "kafka_log_migrate_planned_bytes", "Source bytes the current plan converts, by log dir", labels=["log_dir"]
        )
        info = GaugeMetricFamily(
            "kafka_log_migrate_plan_info", "The plan being watched (always 1)", labels=["plan_id", "version"]
        )
        rate = GaugeMetricFamily(
            "kafka_log_migrate_throughput_bytes_per_second",
            f"Source bytes converted per second over the last {RATE_WINDOW_SECONDS:.0f} s of work",
        )
        eta = GaugeMetricFamily(
            "kafka_log_migrate_eta_seconds", "Seconds until every planned segment is converted, at the current rate"
        )
        if run is not None:
            info.add_metric([run.plan_id, __version__], 1)
            for log_dir, parts in run.by_log_dir().items():
                totals = run.sum(parts)
                for state, n in sorted(totals.states.items(), key=lambda item: item[0].value):
                    partitions.add_metric([log_dir, state.value], n)
                planned_segments.add_metric([log_dir], totals.planned.segments)
                planned_bytes.add_metric([log_dir], totals.planned.bytes)
            rate.add_metric([], run.rate())
            remaining = run.eta_seconds()
            if remaining is not None:
                eta.add_metric([], remaining)
        yield from (partitions, planned_segments, planned_bytes, info, rate, eta)


def register_collector(plugin: WatchedRuns) -> MigrationCollector | None:
    try:
        from prometheus_client import REGISTRY
    except ImportError:  # /metrics then says Prometheus is not available; /migration still works
        return None
    collector = MigrationCollector(plugin)
    try:
        REGISTRY.register(collector)
    except ValueError:  # another scheduler of this process already exports its migration (a test's second cluster)
        logger.info("kafka-log-migrate metrics are exported by another scheduler of this process")
        return None
    return collector


def unregister_collector(collector: MigrationCollector) -> None:
    from prometheus_client import REGISTRY

    with contextlib.suppress(KeyError):  # unregistered already
        REGISTRY.unregister(collector)
