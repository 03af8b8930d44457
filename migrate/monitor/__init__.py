"""Watching a migration on the Dask dashboard: a scheduler plugin counting tasks per stage, and HTTP routes.

The plugin counts every task whose key starts with a stage prefix (``convert-``, ``verify-``, ``swap-`` ...) as it
finishes or errs, also as the Prometheus counter ``kafka_log_migrate_tasks_total{stage,state}`` on the scheduler's
``/metrics``. The routes (``migrate.monitor.routes``, added to ``distributed.scheduler.http.routes``) serve
``/migration/status.json`` and a small page, ``/migration``, beside the dashboard.
"""

from __future__ import annotations

import json
import time
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.http.utils import RequestHandler

PLUGIN_NAME = "kafka-log-migrate"
METADATA_KEY = "kafka-log-migrate"
EVENT_TOPIC = "kafka-log-migrate-segment"
STAGES = ("prepare", "convert", "verify", "swap", "rollback", "finalize", "status")

try:
    from prometheus_client import REGISTRY, Counter

    _COUNTER = Counter(
        "kafka_log_migrate_tasks", "kafka-log-migrate tasks by stage and final state", ["stage", "state"]
    )
except ValueError:  # registered already in this process (a second LocalCluster)
    from prometheus_client import REGISTRY

    _COUNTER = REGISTRY._names_to_collectors["kafka_log_migrate_tasks"]  # type: ignore[attr-defined]
except ImportError:  # prometheus_client missing: counts still show on /migration
    _COUNTER = None


def stage_of(key: Any) -> str | None:
    name = key if isinstance(key, str) else str(key)
    stage = name.split("-", 1)[0]
    return stage if stage in STAGES else None


class MigrationPlugin(SchedulerPlugin):
    name = PLUGIN_NAME

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {s: {"done": 0, "erred": 0} for s in STAGES}
        self.started = time.time()

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        stage = stage_of(key)
        if stage is None or finish not in ("memory", "erred"):
            return
        state = "done" if finish == "memory" else "erred"
        self.counts[stage][state] += 1
        if _COUNTER is not None:
            _COUNTER.labels(stage=stage, state=state).inc()


def status(scheduler: Any) -> dict[str, Any]:
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    pending: dict[str, int] = {}
    for key, ts in scheduler.tasks.items():
        stage = stage_of(key)
        if stage and ts.state not in ("memory", "erred", "forgotten", "released"):
            pending[stage] = pending.get(stage, 0) + 1
    meta = scheduler.get_metadata([METADATA_KEY], default=None)
    return {
        "plan": meta,
        "stages": plugin.counts if plugin else {},
        "pending": pending,
        "workers": len(scheduler.workers),
        "uptime_seconds": round(time.time() - plugin.started, 1) if plugin else None,
    }


class StatusJSON(RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(status(self.server)))


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>kafka-log-migrate</title>
<style>body{font:14px sans-serif;margin:2em}td,th{padding:4px 12px;text-align:right}th{background:#eee}</style>
</head><body><h2>kafka-log-migrate</h2><p id="plan"></p><table id="t"></table>
<p><a href="status">Dask dashboard</a> &middot; <a href="migration/status.json">status.json</a></p>
<script>
async function refresh(){const s=await (await fetch('migration/status.json')).json();
document.getElementById('plan').textContent=s.plan?('plan '+s.plan.plan_id+': '+s.plan.segments+' segments, '
+s.plan.bytes+' bytes, engine workers '+s.workers):'no plan submitted yet';
let h='<tr><th>stage</th><th>done</th><th>pending</th><th>erred</th></tr>';
for(const [k,v] of Object.entries(s.stages)){h+='<tr><td>'+k+'</td><td>'+v.done+'</td><td>'+(s.pending[k]||0)
+'</td><td>'+v.erred+'</td></tr>'}document.getElementById('t').innerHTML=h}
refresh();setInterval(refresh,2000);
</script></body></html>"""


class StatusPage(RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(PAGE)


routes: list[tuple] = [("/migration/status.json", StatusJSON, {}), ("/migration", StatusPage, {})]
