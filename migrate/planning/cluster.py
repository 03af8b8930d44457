"""One plan for a whole cluster, planned on the brokers themselves.

Every broker keeps its log dirs on its own disks, usually at the same path, so no machine can read them all. A Dask
cluster with one worker per broker host (``dask worker`` on each broker) plans instead: ``survey_broker`` runs on
each worker, reads that host's log dirs (given, or ``log.dirs`` of its ``server.properties``), their
``meta.properties`` (cluster id, broker or node id) and Kafka's ``.lock``, and plans them there; the client merges the
surveys into one plan whose log dirs are keyed ``broker-<id>:<path>`` and pinned to the worker's host. Refused, each
naming the broker: brokers of different clusters, two workers claiming one broker id, a broker whose plan is refused
(a held lock, damage, ...), and a broker of ``--brokers`` with no worker (with the command that starts one).

The plan also knows every replica of every partition: the same topic-partition on several brokers.
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import replace

from migrate.errors import ClusterPlanRefusedError, MigrateError, PlanProblem, PlanRefusedError, ProblemKind
from migrate.kafka.properties import log_dirs_of, read_meta_properties
from migrate.model.plan_columns import plan_id_of
from migrate.model.plan_tree import Estimates, LogDirPlan, Plan, TaskPlan
from migrate.model.run_state import Stage
from migrate.planning.checks import ClusterSubject, Scope, judge
from migrate.planning.plan import build_plan
from migrate.planning.request import BrokerSurvey, PlanRequest


def survey_broker(request: PlanRequest, broker_config: str | None, worker: str) -> BrokerSurvey:
    """Run on a broker's worker: who this broker is, and its plan (``request`` with this host's log dirs)."""
    host = worker.split("://")[-1].rsplit(":", 1)[0] or socket.gethostname()
    try:
        log_dirs = log_dirs_of(broker_config) if broker_config else request.log_dirs
    except (MigrateError, OSError) as exc:
        return BrokerSurvey(worker, host, None, None, (), refusal=str(exc))
    ids, clusters = set(), set()
    for d in log_dirs:
        try:
            meta = read_meta_properties(d)
        except (MigrateError, OSError) as exc:
            return BrokerSurvey(worker, host, None, None, log_dirs, refusal=str(exc))
        if meta is not None:
            ids.add(meta.broker_id)
            clusters.add(meta.cluster_id)
    if len(ids) != 1 or None in ids:
        why = "no meta.properties with a broker.id or node.id" if not ids or None in ids else f"broker ids {ids}"
        return BrokerSurvey(worker, host, None, None, log_dirs, refusal=f"log dirs {', '.join(log_dirs)}: {why}")
    broker_id, cluster_id = ids.pop(), (clusters.pop() if len(clusters) == 1 else None)
    try:
        plan = build_plan(replace(request, log_dirs=log_dirs, host_map=()))
    except PlanRefusedError as exc:
        return BrokerSurvey(worker, host, broker_id, cluster_id, log_dirs, refusal=str(exc))
    return BrokerSurvey(worker, host, broker_id, cluster_id, log_dirs, plan=plan)


def merge(surveys: list[BrokerSurvey], expected_brokers: tuple[int, ...], scheduler: str) -> Plan:
    """One plan from every broker's survey, or a refusal naming each broker that stands in the way."""
    refusals = judge(Scope.CLUSTER, ClusterSubject(tuple(surveys), expected_brokers, scheduler))
    if refusals:
        raise ClusterPlanRefusedError(refusals)
    return _combine(sorted(surveys, key=lambda s: s.broker_id or 0))


def _combine(surveys: list[BrokerSurvey]) -> Plan:
    log_dirs: list[LogDirPlan] = []
    tasks: list[TaskPlan] = []
    warnings: list[str] = []
    first = surveys[0].plan
    assert first is not None
    for s in surveys:
        assert s.plan is not None
        if s.plan.options != first.options:  # every worker got the same request: a guard, not an expected case
            problem = f"broker {s.broker_id} planned with options other than the others'"
            raise ClusterPlanRefusedError([PlanProblem(ProblemKind.BROKER_OPTIONS_DIFFER, problem)])
        keys = {d.key: f"broker-{s.broker_id}:{d.log_dir}" for d in s.plan.log_dirs}
        log_dirs += [replace(d, key=keys[d.key], host=s.host) for d in s.plan.log_dirs]
        tasks += [replace(t, id=f"t{len(tasks) + i:05d}", log_dir=keys[t.log_dir]) for i, t in enumerate(s.plan.tasks)]
        warnings += [f"broker {s.broker_id}: {w}" for w in s.plan.warnings]
    parts = [p for d in log_dirs for p in d.partitions]
    plan = dataclasses.replace(
        first,
        plan_id="",
        planned_on=f"{len(surveys)} brokers",
        log_dirs=tuple(log_dirs),
        tasks=tuple(tasks),
        estimates=Estimates(
            partitions=len(parts),
            segments=sum(len(p.segments) for p in parts),
            bytes=sum(p.bytes for p in parts),
            estimated_output_bytes=sum(p.estimated_output_bytes for p in parts),
        ),
        warnings=tuple(warnings),
    )
    return dataclasses.replace(plan, plan_id=plan_id_of(plan))


def plan_cluster(engine, request: PlanRequest, broker_config: str | None, expected_brokers: tuple[int, ...]) -> Plan:
    """Survey every worker of a Dask cluster (one per broker host) and merge their plans. ``engine`` is a
    DaskEngine connected to the cluster's scheduler."""
    from migrate.engines import StageCall

    workers = engine.workers(expect=len(expected_brokers))
    calls = [StageCall((request, broker_config, address), host=address) for address in workers]
    results = engine.map(Stage.SURVEY, survey_broker, calls)
    surveys = []
    for call, r in zip(calls, results):
        if r.ok:
            surveys.append(r.value)
        else:
            address = call.host or "?"
            surveys.append(BrokerSurvey(address, address, None, None, (), refusal=f"the survey failed: {r.error}"))
    return merge(surveys, expected_brokers, engine.address)


def for_brokers(plan: Plan, brokers: tuple[int, ...]) -> Plan:
    """The plan restricted to some brokers (``--brokers 1,3``: the canary first, then the rest). It keeps the plan's
    id, since every broker's state is named by it."""
    unknown = sorted(set(brokers) - {d.broker_id for d in plan.log_dirs})
    if unknown:
        raise MigrateError(
            f"--brokers {','.join(map(str, brokers))}: broker(s) {', '.join(map(str, unknown))} are not in plan "
            f"{plan.plan_id} (it has {', '.join(str(b) for b in plan.brokers())})"
        )
    keys = {d.key for d in plan.log_dirs if d.broker_id in brokers}
    return dataclasses.replace(
        plan,
        log_dirs=tuple(d for d in plan.log_dirs if d.key in keys),
        tasks=tuple(t for t in plan.tasks if t.log_dir in keys),
    )
