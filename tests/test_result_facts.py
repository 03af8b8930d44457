"""The swap's fast reader of stored results (``run/partition/sources.py``) against the codec's strict decoder, on
every result real runs store: the legacy fixtures' conversions and a split source's N outputs."""

from __future__ import annotations

import sqlite3

import pytest
from kafka_layout import make_broker_logdir
from runs import make_plan
from test_split import LIMIT, make_tiny_logdir

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.errors import ModelError
from migrate.model.plan_tree import ConvertOptions
from migrate.run.partition.sources import result_facts, strict
from migrate.run.workspace import state_path

FIXTURE_PARTITIONS = ["plain-v0-0", "gzip-v0-0", "lz4-v1-1", "snappy-v0-0", "plain-v1-0"]


def stored_results(plan) -> list[tuple[int, str]]:
    out = []
    for d in plan.log_dirs:
        with sqlite3.connect(state_path(d.log_dir, plan.plan_id)) as db:
            out += db.execute("SELECT base, result FROM segments WHERE result IS NOT NULL").fetchall()
    return out


@pytest.mark.parametrize("shape", ["fixtures", "split"])
def test_the_fast_reader_reads_what_the_strict_decoder_reads(tmp_path, shape):
    if shape == "fixtures":
        log_dir = make_broker_logdir(tmp_path, FIXTURE_PARTITIONS)
        plan, _ = make_plan(tmp_path, log_dir)
    else:
        log_dir = make_tiny_logdir(tmp_path)
        plan, _ = make_plan(tmp_path, log_dir, options=ConvertOptions(max_segment_bytes=LIMIT))
    assert pipeline.execute(plan, SerialEngine()).ok
    results = stored_results(plan)
    assert len(results) >= (5 if shape == "fixtures" else 2)
    for base, text in results:
        assert result_facts(base, text) == strict(base, text)
    if shape == "split":
        assert any(strict(base, text).part_names for base, text in results)  # the N outputs are read too


def test_a_damaged_stored_result_is_the_tools_error():
    with pytest.raises(ModelError, match="segment 7"):
        result_facts(7, '{"outputs": 3')
    with pytest.raises(ModelError):
        result_facts(7, '{"outputs": {}, "live_before": []}')
