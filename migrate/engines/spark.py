"""Run the stages on Spark through PySpark: the plan's calls are parallelized, one Spark task each.

PySpark cannot pin a task to a host (``parallelize`` has no location preferences, and Spark's are soft anyway), so
a plan whose log dirs map to more than one host is refused: run ``execute`` once per broker host with a plan of
that host's log dirs (on a Spark cluster whose executors run on that host), or use the Dask engine. Every stage also
checks, inside the task, that the log dir exists on the executor's host and fails loudly otherwise.

Progress is reported from the driver as results arrive (PySpark accumulators have no names in the UI).
"""

from __future__ import annotations

import os
import shutil
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from migrate.engines import CallResult, Fold, StageCall
from migrate.errors import MigrateError
from migrate.model.run_state import Stage

INSTALL_HINT = "pip install 'kafka-log-migrate[spark]' (PySpark, about 0.5 GB; it needs Java 17 or newer)"


def _run_calls(
    fn: Callable[..., Any], plan_var: Any, items: Iterable[tuple[int, tuple[Any, ...]]]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each call of one partition of the job, on an executor; ``plan_var``: the plan's broadcast, None without one."""
    for index, args in items:
        if plan_var is not None:
            args = (plan_var.value, *args)
        try:
            yield index, {"ok": True, "value": fn(*args)}
        except Exception as exc:  # reported to the driver per call, never retried: stages are idempotent but loud
            yield index, {"ok": False, "error": str(exc), "type": type(exc).__name__, "trace": traceback.format_exc()}


class SparkEngine:
    name = "spark"

    def __init__(self, master: str = "local[*]", ui: bool = True, progress: bool | None = None) -> None:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise MigrateError("--engine spark needs Java 17 or newer on the PATH (or JAVA_HOME); none was found")
        try:
            from pyspark.sql import SparkSession
        except ImportError as exc:
            raise MigrateError(f"--engine spark needs PySpark, which is not installed: {INSTALL_HINT}") from exc
        if master.startswith("local"):
            # Spark's web UI binds to SPARK_LOCAL_IP, else every address: on a broker host its UI (which shows the
            # job and can kill it) must not face the network unless the operator says so by setting it
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        self.master = master
        self.shares_files = master.startswith("local")
        self.session = (
            SparkSession.builder.master(master)
            .appName("kafka-log-migrate")
            .config("spark.ui.enabled", "true" if ui else "false")
            .config("spark.task.maxFailures", "1")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        self.context = self.session.sparkContext
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._broadcasts: dict[str, Any] = {}

    @property
    def ui_url(self) -> str:
        return self.context.uiWebUrl or "(Spark UI disabled)"

    def map(
        self, stage: Stage, fn: Callable[..., Any], calls: list[StageCall], fold: Fold | None = None
    ) -> list[CallResult]:
        hosts = {c.host for c in calls if c.host}
        if len(hosts) > 1 and not self.master.startswith("local"):
            raise MigrateError(
                f"the plan maps log dirs to {len(hosts)} hosts ({', '.join(sorted(hosts))}), but PySpark cannot pin a "
                "task to a host. Run execute once per broker host with a plan of that host's log dirs, or use "
                "--engine dask (the default), which pins tasks with workers=."
            )
        if not calls:
            return []
        plan = calls[0].plan
        plan_var = None
        if plan is not None:
            if plan.plan_id not in self._broadcasts:
                self._broadcasts[plan.plan_id] = self.context.broadcast(plan)
            plan_var = self._broadcasts[plan.plan_id]
        items = [(i, c.args) for i, c in enumerate(calls)]
        self.context.setJobGroup(stage.value, f"kafka-log-migrate {stage.value}: {len(calls)} tasks")
        rdd = self.context.parallelize(items, numSlices=len(items))
        out: list[CallResult] = [CallResult(False)] * len(calls)
        for done, (index, r) in enumerate(
            rdd.mapPartitions(lambda part: _run_calls(fn, plan_var, part)).toLocalIterator(), start=1
        ):
            got = CallResult(True, r["value"]) if r["ok"] else CallResult(False, error=r["error"], error_type=r["type"])
            out[index] = got if fold is None else fold(index, got)
            if self.progress:
                print(f"\r{stage.value}: {done}/{len(calls)}", end="", file=sys.stderr, flush=True)
        if self.progress:
            print(file=sys.stderr)
        return out

    def close(self) -> None:
        self.session.stop()
