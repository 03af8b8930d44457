"""The columnar plan (migrate.model.plan_columns): the same plan as the JSON form, loaded lazily, refused when edited,
and executed to the same bytes."""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, LEGACY_LOGDIR, copy_logdir
from runs import assert_scan_agrees, snapshot

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.engines.dask import DaskEngine
from migrate.errors import MigrateError
from migrate.model.plan_columns import HEAD_KEY, SegmentRows, TaskRows, plan_id_of
from migrate.model.plan_tree import ConvertOptions, Plan, PlanForm, dump_plan_json, load_plan_json
from migrate.planning.plan import build_plan, form_for, load_plan, write_plan
from migrate.planning.request import PlanRequest


def _plans(log_dir: Path, tmp_path: Path, **request) -> tuple[Plan, Plan, Path]:
    """The JSON and the columnar plan of ``log_dir``, the columnar one written and loaded back."""
    request = {"allow_unclean": True, "options": ConvertOptions(truncate_tail=True), **request}
    as_json = build_plan(PlanRequest(log_dirs=(str(log_dir),), **request))
    columnar = build_plan(PlanRequest(log_dirs=(str(log_dir),), form=PlanForm.COLUMNAR, **request))
    path = tmp_path / "plan.parquet"
    write_plan(columnar, path)
    return as_json, load_plan(path), path


def _same_tree(a: Plan, b: Plan) -> None:
    assert a.options == b.options and a.estimates == b.estimates and a.warnings == b.warnings

    def head(d):  # free space is seen, not planned: it moves between two plans
        return dataclasses.replace(
            d, partitions=(), filesystems=tuple(dataclasses.replace(f, free_bytes=0) for f in d.filesystems)
        )

    assert [head(d) for d in a.log_dirs] == [head(d) for d in b.log_dirs]
    for da, db in zip(a.log_dirs, b.log_dirs, strict=True):
        for pa_, pb in zip(da.partitions, db.partitions, strict=True):
            assert dataclasses.replace(pa_, segments=()) == dataclasses.replace(pb, segments=())
            assert tuple(pa_.segments) == tuple(pb.segments)
            for s in pa_.segments:
                assert pb.segment_by_base[s.base_offset] == s
            # what prepare reads of every segment, from the columns without building a record each
            assert (
                pa_.identities()
                == pb.identities()
                == [(s.base_offset, s.size, s.mtime_ns, s.inode) for s in pb.segments]
            )
            assert pb.identities() and all(type(x) is int for row in pb.identities() for x in row)
    assert len(a.tasks) == len(b.tasks)
    for ta, tb in zip(a.tasks, b.tasks, strict=True):
        assert (ta.id, ta.log_dir, ta.bytes, ta.byte_range) == (tb.id, tb.log_dir, tb.bytes, tb.byte_range)
        assert tuple(ta.segments) == tuple(tb.segments)


def test_the_columnar_plan_holds_the_json_plans_tree_with_ranges_tails_and_splits(tmp_path):
    log_dir = copy_logdir(LEGACY_LOGDIR, tmp_path / "logdir", FIXTURES / "mtimes.json")
    as_json, columnar, _path = _plans(log_dir, tmp_path, range_bytes=2048, task_segments=3)
    assert columnar.form == PlanForm.COLUMNAR and as_json.form is None
    assert columnar.plan_id != as_json.plan_id  # each form's id is its own scheme's
    _same_tree(as_json, columnar)
    assert any(t.byte_range is not None for t in columnar.tasks)  # range tasks kept whole
    assert any(s.tail_drop for p in columnar.log_dirs[0].partitions for s in p.segments)
    assert any(s.range_cuts for p in columnar.log_dirs[0].partitions for s in p.segments)
    first = columnar.log_dirs[0].partitions[0]
    assert isinstance(first.segments, SegmentRows)
    assert any(isinstance(t.segments, TaskRows) for t in columnar.tasks)
    assert 2048 not in first.segment_by_base  # no segment at that base offset: a miss, not an error

    split = ConvertOptions(max_segment_bytes=1500, truncate_tail=True)
    as_json, columnar, _ = _plans(log_dir, tmp_path, options=split)
    _same_tree(as_json, columnar)
    assert any(s.split is not None for p in columnar.log_dirs[0].partitions for s in p.segments)


def test_a_columnar_plan_is_small_and_its_json_dump_keeps_its_id(tmp_path):
    log_dir = copy_logdir(LEGACY_LOGDIR, tmp_path / "logdir", FIXTURES / "mtimes.json")
    _as_json, columnar, path = _plans(log_dir, tmp_path)
    assert path.read_bytes()[:4] == b"PAR1"
    # the review form: the columnar plan as JSON, with its form, so its id still holds
    text = dump_plan_json(columnar)
    assert json.loads(text)["form"] == "columnar"
    again = load_plan_json(text, id_of=plan_id_of)
    assert again.plan_id == columnar.plan_id
    _same_tree(columnar, again)
    assert form_for("x/plan.parquet") == PlanForm.COLUMNAR and form_for("plan.json") == PlanForm.JSON


def _rewrite(path: Path, table: pa.Table) -> None:
    pq.write_table(table, path)


def test_an_edited_columnar_plan_is_refused(tmp_path):
    log_dir = copy_logdir(LEGACY_LOGDIR, tmp_path / "logdir", FIXTURES / "mtimes.json")
    _, _, path = _plans(log_dir, tmp_path)
    table = pq.read_table(path)
    sizes = table.column("size").to_pylist()
    sizes[0] += 1
    _rewrite(path, table.set_column(table.column_names.index("size"), "size", pa.array(sizes, pa.int64())))
    with pytest.raises(MigrateError, match="edited after it was made"):
        load_plan(path)

    _, _, path = _plans(log_dir, tmp_path)
    table = pq.read_table(path)
    head = json.loads(table.schema.metadata[HEAD_KEY])
    head["options"]["index_interval_bytes"] = 1
    _rewrite(path, table.replace_schema_metadata({HEAD_KEY: json.dumps(head)}))
    with pytest.raises(MigrateError, match="edited after it was made"):
        load_plan(path)

    path.write_bytes(b"PAR1 not really")
    with pytest.raises(MigrateError, match="not a readable columnar plan"):
        load_plan(path)


def test_a_columnar_plan_executes_to_the_json_plans_bytes(tmp_path):
    runs = {}
    for form in (PlanForm.JSON, PlanForm.COLUMNAR):
        log_dir = copy_logdir(LEGACY_LOGDIR, tmp_path / form.value / "logdir", FIXTURES / "mtimes.json")
        options = ConvertOptions(truncate_tail=True)
        request = PlanRequest(
            log_dirs=(str(log_dir),), form=form, range_bytes=2048, allow_unclean=True, options=options
        )
        plan = build_plan(request)
        path = tmp_path / form.value / ("plan.parquet" if form == PlanForm.COLUMNAR else "plan.json")
        write_plan(plan, path)
        plan = load_plan(path)
        report = pipeline.execute(plan, SerialEngine())
        assert report.ok, report.errors
        assert_scan_agrees(plan, report)
        runs[form] = {
            k: v for k, v in snapshot(log_dir).items() if ".kafka-log-migrate" not in k and k != "." and v[0] != "dir"
        }
        rolled = pipeline.rollback(plan, SerialEngine(), path)
        assert rolled.ok
    assert runs[PlanForm.JSON] == runs[PlanForm.COLUMNAR]
    assert any(k.endswith(".log") for k in runs[PlanForm.JSON])


def test_a_columnar_plan_travels_to_workers_packed_without_pyarrow(tmp_path):
    """A Dask scatter pickles the plan: its columns packed (zstd frames of each column's steps) and each log dir's
    partitions as boundaries over them, never record by record; the copy is the same plan, and a worker unpacks it
    without importing pyarrow (31 MB of a worker's memory)."""
    log_dir = copy_logdir(LEGACY_LOGDIR, tmp_path / "logdir", FIXTURES / "mtimes.json")
    _, columnar, _ = _plans(log_dir, tmp_path, range_bytes=2048)
    sent = pickle.dumps(columnar)
    assert b"PAR1" not in sent
    copy = pickle.loads(sent)
    assert copy.plan_id == columnar.plan_id
    _same_tree(columnar, copy)
    assert pickle.dumps(copy) == sent  # a worker sends on what it was sent
    (tmp_path / "sent").write_bytes(sent)
    probe = "import pickle, sys; p = pickle.load(open(sys.argv[1], 'rb')); print(p.plan_id, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "sent")], capture_output=True, text=True)
    assert out.stdout.split() == [columnar.plan_id, "False"], out.stderr


@pytest.mark.xdist_group("dask-local")
def test_a_columnar_plan_executes_on_dask_workers(tmp_path):
    log_dir = copy_logdir(LEGACY_LOGDIR, tmp_path / "logdir", FIXTURES / "mtimes.json")
    _, plan, _ = _plans(log_dir, tmp_path, range_bytes=2048)
    engine = DaskEngine(n_workers=2, dashboard_address="127.0.0.1:0", progress=False)
    try:
        report = pipeline.execute(plan, engine)
    finally:
        engine.close()
    assert report.ok, report.errors
    assert_scan_agrees(plan, report)
    assert report.totals.verified == plan.estimates.segments
