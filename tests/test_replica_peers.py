"""A canary migrated alone, then the others: the later run compares its replicas with the canary's (read only), and
a run names the replicas it could not compare. In this process (the serial engine): the cluster test runs the same
on real Dask workers (test_rolling_cluster.py)."""

from __future__ import annotations

from kafka_layout import make_broker_logdir
from runs import snapshot
from test_cluster import HOLDINGS, diverge

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.planning.cluster import for_brokers, merge, survey_broker
from migrate.planning.request import PlanRequest


def cluster_plan(brokers):
    surveys = [survey_broker(PlanRequest((str(d),)), None, f"tcp://127.0.0.{b + 1}:1") for b, d in brokers.items()]
    return merge(surveys, tuple(brokers), "tcp://127.0.0.1:8786")


def others(plan, run):
    keys = {d.key for d in run.log_dirs}
    return tuple(d for d in plan.log_dirs if d.key not in keys)


def magic(log_dir, partition):
    return (log_dir / partition / "00000000000000000000.log").read_bytes()[16]


def test_the_others_are_compared_with_the_canary_migrated_alone(tmp_path):
    brokers = {
        b: make_broker_logdir(tmp_path / f"b{b}", partitions=parts, broker_id=b) for b, parts in HOLDINGS.items()
    }
    diverge(brokers[1] / "plain-v0-1" / "00000000000000000000.log")  # the canary's copy differs from broker 3's
    plan = cluster_plan(brokers)

    # the canary alone, while broker 3's log dir cannot be read: it swaps, and says what it did not compare
    away = brokers[3].with_name("away")
    brokers[3].rename(away)
    canary = for_brokers(plan, (1,))
    report = pipeline.execute(
        canary, SerialEngine(), require_consistent_replicas=True, replica_peers=others(plan, canary)
    )
    away.rename(brokers[3])
    assert report.ok and report.divergent_replicas == ()
    [unchecked] = report.unchecked_replicas
    assert (unchecked.partition, unchecked.brokers) == ("plain-v0-1", (3,))
    assert f"log dir {brokers[3]} of broker 3 is not there on its host" in unchecked.reason
    assert magic(brokers[1], "plain-v0-1") == 2

    # the others: compared with the canary's live (migrated) copy, which is only read
    before = snapshot(brokers[1])
    rest = for_brokers(plan, (2, 3))
    report = pipeline.execute(rest, SerialEngine(), require_consistent_replicas=True, replica_peers=others(plan, rest))
    assert not report.ok and report.unchecked_replicas == ()
    [divergence] = report.divergent_replicas
    assert (divergence.partition, divergence.brokers, divergence.first_offset) == ("plain-v0-1", (3, 1), 0)
    assert magic(brokers[3], "plain-v0-1") == 0 and magic(brokers[3], "lz4-v1-1") == 2  # only the divergent one stays
    assert all(magic(brokers[2], p) == 2 for p in HOLDINGS[2])
    assert snapshot(brokers[1]) == before

    # without the canary as a peer (how execute --brokers 2,3 ran before): nothing to compare plain-v0-1 with
    assert pipeline.compare_replicas(rest, SerialEngine(), [d.key for d in rest.log_dirs]) == ([], [])
