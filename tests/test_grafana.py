"""The Grafana dashboard is valid JSON of Grafana's shape, and every metric it queries is one the scheduler exports."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from conftest import REPO
from kafka_layout import make_broker_logdir
from prometheus_client.parser import text_string_to_metric_families

from migrate import pipeline
from migrate.engines.dask import DaskEngine
from migrate.planning.plan import build_plan
from migrate.planning.request import PlanRequest

# one xdist worker: its one Dask run serves every test
pytestmark = pytest.mark.xdist_group("grafana")

DASHBOARD = REPO / "dashboards" / "kafka-log-migrate.grafana.json"
METRIC = re.compile(r"\b(?:kafka_log_migrate|dask)_[a-z0-9_]+\b")


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_dashboard_is_grafana_shaped():
    d = load()
    assert d["uid"] and d["title"] and isinstance(d["schemaVersion"], int)
    assert [v["name"] for v in d["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
    for expr in queries(d):
        assert METRIC.search(expr), expr
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
    used = {m for e in queries(d) for m in METRIC.findall(e)}
    assert any(m.startswith("kafka_log_migrate_") for m in used) and any(m.startswith("dask_") for m in used)


@pytest.fixture(scope="module")
def scheduler_metrics(tmp_path_factory) -> set[str]:
    """Sample names on the /metrics of a scheduler that ran a migration."""
    log_dir = make_broker_logdir(tmp_path_factory.mktemp("grafana"), partitions=["plain-v0-1"])
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),)))
    engine = DaskEngine(n_workers=1, processes=False, dashboard_address="127.0.0.1:0", progress=False)
    try:
        assert pipeline.execute(plan, engine).ok
        base = engine.dashboard_link.rsplit("/", 1)[0]
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        engine.close()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_every_metric_the_dashboard_queries_is_exported_by_the_scheduler(scheduler_metrics):
    used = {m for e in queries(load()) for m in METRIC.findall(e)}
    assert sorted(used - scheduler_metrics) == []
    assert {"kafka_log_migrate_source_bytes_total", "dask_scheduler_tasks_compute_seconds_total"} <= used
