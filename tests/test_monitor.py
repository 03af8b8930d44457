"""The migration is visible on the Dask dashboard server: /migration/status.json, /migration and /metrics."""

from __future__ import annotations

import json
import urllib.request

from kafka_layout import make_broker_logdir

from migrate import pipeline
from migrate.engines.dask import DaskEngine
from migrate.plan import PlanRequest, build_plan


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def test_stage_counts_on_the_dashboard_and_prometheus(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0"])
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), task_bytes=1))
    engine = DaskEngine(n_workers=1, processes=False, dashboard_address="127.0.0.1:0", progress=False)
    try:
        assert pipeline.execute(plan, engine).ok
        base = engine.dashboard_link.rsplit("/", 1)[0]
        status = json.loads(fetch(f"{base}/migration/status.json"))
        assert status["plan"]["plan_id"] == plan.plan_id
        assert status["stages"]["convert"] == {"done": len(plan.tasks), "erred": 0}
        assert status["stages"]["prepare"]["done"] == 1 and status["stages"]["swap"]["done"] == 1
        assert "kafka-log-migrate" in fetch(f"{base}/migration")
        metrics = fetch(f"{base}/metrics")
        assert 'kafka_log_migrate_tasks_total{stage="convert",state="done"}' in metrics
    finally:
        engine.close()
