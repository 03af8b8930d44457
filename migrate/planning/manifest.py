"""Plan a cluster into a manifest: each broker's worker plans its own log dirs and keeps its part on its own host.

``plan --scheduler ... --manifest`` (``migrate.model.cluster_manifest``): the survey of ``migrate.planning.cluster``
runs on every worker as before, but the broker's plan is written there, columnar, beside its log dirs (never inside
them), in ``<parent of its first log dir>/.kafka-log-migrate-plans/<part plan id>.parquet``; the worker returns
where it is, its sha256 and its totals. The client checks the surveys as for one plan (different clusters, a broker
claimed twice, a refused broker, a broker of ``--brokers`` without a worker) and writes the manifest.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from pathlib import Path

from migrate import __version__
from migrate.errors import ClusterPlanRefusedError
from migrate.model.cluster_manifest import MANIFEST_KIND, MANIFEST_VERSION, BrokerPart, ClusterManifest, manifest_id
from migrate.model.plan_tree import Estimates, PlanForm
from migrate.model.run_state import Stage
from migrate.planning.checks import ClusterSubject, Scope, judge
from migrate.planning.cluster import survey_broker
from migrate.planning.plan import write_plan
from migrate.planning.request import BrokerSurvey, PlanRequest

PARTS_DIR_NAME = ".kafka-log-migrate-plans"


def parts_dir(log_dirs: tuple[str, ...]) -> Path:
    """Where a broker keeps its parts: beside its first log dir, never inside one (a broker's loader would see it)."""
    return Path(log_dirs[0]).resolve().parent / PARTS_DIR_NAME


def survey_part(request: PlanRequest, broker_config: str | None, worker: str) -> BrokerSurvey:
    """Run on a broker's worker: plan its log dirs as ``survey_broker`` does, keep the plan here, return where."""
    survey = survey_broker(replace(request, form=PlanForm.COLUMNAR), broker_config, worker)
    if survey.plan is None:
        return survey
    plan = survey.plan
    folder = parts_dir(survey.log_dirs)
    folder.mkdir(exist_ok=True)
    path = folder / f"{plan.plan_id}.parquet"
    write_plan(plan, path)
    data = path.read_bytes()
    part = BrokerPart(
        broker_id=survey.broker_id,  # type: ignore[arg-type]  # a survey with a plan has its broker id
        host=survey.host,
        worker=worker,
        log_dirs=tuple(d.log_dir for d in plan.log_dirs),
        path=str(path),
        plan_id=plan.plan_id,
        sha256=hashlib.sha256(data).hexdigest(),
        file_bytes=len(data),
        estimates=plan.estimates,
        warnings=plan.warnings,
    )
    return replace(survey, plan=None, part=part)


def manifest_of(
    surveys: list[BrokerSurvey], request: PlanRequest, expected: tuple[int, ...], scheduler: str
) -> ClusterManifest:
    """The manifest of the brokers' parts, or a refusal naming each broker that stands in the way."""
    refusals = judge(Scope.CLUSTER, ClusterSubject(tuple(surveys), expected, scheduler))
    if refusals:
        raise ClusterPlanRefusedError(refusals)
    parts = sorted((s.part for s in surveys if s.part is not None), key=lambda p: p.broker_id)
    clusters = {s.cluster_id for s in surveys}
    manifest = ClusterManifest(
        kind=MANIFEST_KIND,
        version=MANIFEST_VERSION,
        manifest_id="",
        tool=f"kafka-log-migrate {__version__}",
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        planned_on=scheduler,
        cluster_id=clusters.pop() if len(clusters) == 1 else None,
        options=request.options,
        brokers=tuple(parts),
        estimates=Estimates(
            partitions=sum(p.estimates.partitions for p in parts),
            segments=sum(p.estimates.segments for p in parts),
            bytes=sum(p.estimates.bytes for p in parts),
            estimated_output_bytes=sum(p.estimates.estimated_output_bytes for p in parts),
        ),
    )
    return replace(manifest, manifest_id=manifest_id(manifest))


def plan_manifest(
    engine, request: PlanRequest, broker_config: str | None, expected_brokers: tuple[int, ...]
) -> ClusterManifest:
    """Survey every worker of a Dask cluster (one per broker host); each keeps its part; the manifest comes back."""
    from migrate.engines import StageCall

    workers = engine.workers(expect=len(expected_brokers))
    calls = [StageCall((request, broker_config, address), host=address) for address in workers]
    results = engine.map(Stage.SURVEY, survey_part, calls)
    surveys = []
    for call, r in zip(calls, results, strict=True):
        if r.ok:
            surveys.append(r.value)
        else:
            address = call.host or "?"
            surveys.append(BrokerSurvey(address, address, None, None, (), refusal=f"the survey failed: {r.error}"))
    return manifest_of(surveys, request, expected_brokers, engine.address)
