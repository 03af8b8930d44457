"""status's cheap answer for a settled partition (``migrate.run.swap_status.settled_truth``) is the exact answer
(``partition_truth``) wherever it gives one, and gives none wherever a file or the record says anything else: status
then says what ``partition_truth`` sees, as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafka_layout import make_broker_logdir
from runs import make_plan
from test_crash_recovery import PARTITIONS

from migrate import pipeline
from migrate.cli import main
from migrate.engines import SerialEngine
from migrate.errors import ModelError
from migrate.run.state import StateStore
from migrate.run.swap_record import FileTruth, partition_truth, record_file
from migrate.run.swap_status import settled_truth
from migrate.stages.reconcile import open_reconciled


@pytest.fixture
def migrated(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    assert pipeline.execute(plan, SerialEngine()).ok
    return broker, plan, plan_path


def _both(plan, broker) -> dict[str, tuple[FileTruth | None, FileTruth]]:
    key = plan.log_dirs[0].key
    out = {}
    with StateStore.open(broker, plan.plan_id) as store:
        for name, rows in store.swap_pieces():
            part = plan.partition(key, name)
            fast = settled_truth(part.dir, plan.plan_id, name, rows)
            exact = partition_truth(part, plan.plan_id, known=store.swap_texts(name))
            if fast is not None:  # what the verbs ask of a settled truth is what they ask of the exact one
                assert fast.log_edges() == exact.log_edges() and fast.as_database_says == exact.as_database_says
                assert fast.has_record and fast.record == exact.record
            out[name] = (None if fast is None else fast.truth, exact.truth)
    return out


def _status(capsys, plan_path) -> str:
    capsys.readouterr()
    assert main(["status", "--plan", str(plan_path)]) == 0
    return capsys.readouterr().out


def test_a_migrated_log_dir_is_settled_as_converted(migrated):
    broker, plan, _ = migrated
    both = _both(plan, broker)
    assert both and all(v == (FileTruth.CONVERTED, FileTruth.CONVERTED) for v in both.values()), both


def _a_live_log(broker, plan):
    part = plan.log_dirs[0].partitions[0]
    return part, sorted(p for p in os.listdir(part.dir) if p.endswith(".log"))[0]


@pytest.mark.parametrize("how", ["append", "replace", "touch", "remove"])
def test_a_live_file_changed_after_the_swap_is_not_settled_and_status_names_it(migrated, capsys, how):
    broker, plan, plan_path = migrated
    part, name = _a_live_log(broker, plan)
    path = os.path.join(part.dir, name)
    if how == "append":  # a broker appending to the swapped file: same inode
        with open(path, "ab") as f:
            f.write(b"\0")
    elif how == "replace":  # a broker rewriting it: same size, another inode
        data = Path(path).read_bytes()
        os.unlink(path)
        with open(path, "wb") as f:
            f.write(data)
        os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns))
    elif how == "touch":
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    else:
        os.unlink(path)
    fast, exact = _both(plan, broker)[part.name]
    assert fast is None and exact == FileTruth.CHANGED
    out = _status(capsys, plan_path)
    assert part.name in out and "neither the original" in out and path in out, out


def test_a_record_that_is_not_the_databases_is_not_settled(migrated, capsys):
    broker, plan, plan_path = migrated
    part = plan.log_dirs[0].partitions[0]
    path = record_file(part.dir, plan.plan_id)
    text = Path(path).read_text()
    at = text.index('"records":') + len('"records":')
    with open(path, "w") as f:  # a digit of a result changed: the record is no longer the database's rows
        f.write(text[:at] + ("7" if text[at] != "7" else "8") + text[at + 1 :])
    fast, exact = _both(plan, broker)[part.name]
    assert fast is None and exact == FileTruth.CONVERTED  # the exact path decodes it, and judges the files
    with open(path, "w") as f:  # torn
        f.write(text[: len(text) // 2])
    with StateStore.open(broker, plan.plan_id) as store:
        rows = dict(store.swap_pieces())[part.name]
    assert settled_truth(part.dir, plan.plan_id, part.name, rows) is None
    out = _status(capsys, plan_path)
    assert part.name in out and "swap record" in out, out


def test_rolled_back_files_are_settled_as_original_and_status_says_so(migrated, capsys):
    broker, plan, plan_path = migrated
    part = plan.log_dirs[0].partitions[0]
    for name in sorted(os.listdir(part.dir)):  # the originals put back by hand, the record left: ORIGINAL
        if name.endswith((".index", ".timeindex")):
            os.unlink(os.path.join(part.dir, name))
    backups = os.path.join(os.path.dirname(record_file(part.dir, plan.plan_id)))
    for name in os.listdir(backups):
        if name.endswith(".orig"):
            os.replace(os.path.join(backups, name), os.path.join(part.dir, name[: -len(".orig")]))
    fast, exact = _both(plan, broker)[part.name]
    assert exact == FileTruth.ORIGINAL and fast in (None, FileTruth.ORIGINAL)
    out = _status(capsys, plan_path)
    assert f"{part.name}: the state said migrated, the files say original" in out, out


def test_only_finalize_keeps_the_truths_and_every_verb_knows_the_settled_partitions(migrated):
    broker, plan, _ = migrated
    key = plan.log_dirs[0].key
    entry = plan.log_dir(key)
    store, plain = open_reconciled(plan, key, entry, str(broker), write=True)
    assert store is not None
    store.close()
    assert plain.truths == {}  # execute's prepare and swap, rollback: ~0.5 KB a segment they never ask again
    assert plain.settled == frozenset(PARTITIONS)
    store, kept = open_reconciled(plan, key, entry, str(broker), write=True, keep_truths=True)
    assert store is not None
    store.close()
    assert sorted(kept.truths) == sorted(PARTITIONS)
    assert {t.truth for t in kept.truths.values()} == {FileTruth.CONVERTED}
    assert kept.settled == plain.settled
    # kept with what finalize asks of them (verdict, record, log edges), not the files' texts: no record to build
    for name, truth in kept.truths.items():
        exact = partition_truth(plan.partition(key, name), plan.plan_id)
        assert truth.has_record and truth.as_database_says
        assert truth.log_edges() == exact.log_edges() and all(len(e) == 64 for _, e in truth.log_edges())
        assert all(s[1] is None and s[2] is None for s in truth.data.segments)
        with pytest.raises(ModelError, match="log edges only"):
            _ = truth.record


def test_a_changed_live_file_is_not_settled_and_rollback_refuses_it(migrated):
    broker, plan, plan_path = migrated
    log = sorted((broker / PARTITIONS[0]).glob("*.log"))[0]
    os.utime(log, ns=(log.stat().st_atime_ns, log.stat().st_mtime_ns + 1))  # a broker touched it
    key = plan.log_dirs[0].key
    store, reconciled = open_reconciled(plan, key, plan.log_dir(key), str(broker), write=True)
    assert store is not None
    store.close()
    assert PARTITIONS[0] not in reconciled.settled and set(PARTITIONS[1:]) <= reconciled.settled
    refused = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert not refused.ok and any(str(log) in line for line in refused.refused), refused.refused
