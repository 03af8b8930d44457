"""``plan --scheduler ... --manifest`` and the verbs given a cluster manifest instead of a plan
(``migrate.cluster.parts``): each broker runs the verb over its own part on its own host; one line per broker."""

from __future__ import annotations

import argparse
from pathlib import Path

from migrate.codec import to_json
from migrate.commands.engine import engine_for, parse_brokers
from migrate.errors import MigrateError, ModelError
from migrate.model.cluster_manifest import (
    ClusterManifest,
    Verb,
    dump_manifest_json,
    is_manifest_json,
    load_manifest_json,
)
from migrate.planning.request import PlanRequest
from migrate.run.workspace import write_durably
from migrate.units import human_bytes, human_seconds
from migrate.watch.runlog import result

MANIFEST_SNIFF_BYTES = 4096


def manifest_at(path: str) -> ClusterManifest | None:
    """The manifest at ``path``; None where the file is a plan (or nothing readable: the plan loader says why)."""
    try:
        with open(path, "rb") as f:
            head = f.read(MANIFEST_SNIFF_BYTES)
    except OSError:
        return None
    if not is_manifest_json(head):
        return None
    try:
        return load_manifest_json(Path(path).read_text(), path)
    except ModelError as exc:
        raise MigrateError(str(exc)) from exc


def plan_manifest_command(args: argparse.Namespace, request: PlanRequest) -> int:
    from migrate.planning.manifest import plan_manifest

    with engine_for(args, engine="dask") as engine:
        manifest = plan_manifest(engine, request, args.broker_config, parse_brokers(args.brokers or ""))
    write_durably(args.output, dump_manifest_json(manifest))
    est = manifest.estimates
    lines = [
        f"broker {b.broker_id} ({b.host}): {b.estimates.segments} segments, part {b.plan_id} kept at {b.path} "
        f"({human_bytes(b.file_bytes)})"
        for b in manifest.brokers
    ]
    lines += [f"warning: broker {b.broker_id}: {w}" for b in manifest.brokers for w in b.warnings]
    lines += [
        f"manifest {manifest.manifest_id} written to {args.output}: {len(manifest.brokers)} brokers, "
        f"{est.partitions} partitions, {est.segments} segments, {human_bytes(est.bytes)} in; each broker keeps its "
        "own part.",
        f"Review it, then: kafka-log-migrate execute --plan {args.output} --scheduler {args.scheduler}",
    ]
    result(to_json(manifest), args.json, "\n".join(lines))
    return 0


def run_manifest_verb(args: argparse.Namespace, verb: Verb) -> int | None:
    """The verb over a manifest at ``args.plan``; None where ``args.plan`` is a plan, for the verb's own code."""
    manifest = manifest_at(args.plan)
    if manifest is None:
        return None
    from migrate.cluster.parts import run_manifest

    with engine_for(args, engine="dask") as engine:
        brokers = parse_brokers(args.brokers) if getattr(args, "brokers", None) else ()
        outcomes = run_manifest(manifest, engine, verb, brokers, force=getattr(args, "force", False))
    lines = []
    for o in outcomes:
        state = "ok" if o.ok else "FAILED"
        lines.append(
            f"broker {o.broker_id}: {verb} {state}: {o.partitions_done} of {o.partitions} partitions, "
            f"{o.segments} segments, {human_seconds(o.seconds)}" + (f", {o.problems} problem(s)" if o.problems else "")
        )
        lines += [f"  {x}" for x in o.first_problems]
    failed = [o.broker_id for o in outcomes if not o.ok]
    lines.append(
        f"manifest {manifest.manifest_id}: {verb} ok on every broker ({len(outcomes)})"
        if not failed
        else f"manifest {manifest.manifest_id}: {verb} failed on broker(s) {', '.join(map(str, failed))}; the others "
        f"are as their lines say. Run `{verb} --plan {args.plan} --brokers {','.join(map(str, failed))}` again "
        "once the problem is fixed."
    )
    result([to_json(o) for o in outcomes], getattr(args, "json", False), "\n".join(lines))
    return 0 if not failed else 1
