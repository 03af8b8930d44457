"""How many segments a plan's convert task holds: tasks of 1024 tiny segments on a big log dir (the engine's cost per
task amortized), 256 or fewer on a small one (its tasks still spread over the workers), never more than asked for."""

from __future__ import annotations

import os
from pathlib import Path

from prestage_layout import gen

from migrate.demo.legacy_logdir import PartitionFiles, write_broker_files
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import ConvertOptions, PlanForm
from migrate.planning.plan import build_plan, segments_per_task
from migrate.planning.request import PlanRequest

TOPIC = "many"
MTIME_NS = 1_500_000_000 * 10**9


def test_segments_per_task_grows_with_the_log_dir_up_to_what_is_asked():
    assert segments_per_task(10, 1024) == 256  # one task: nothing to spread
    assert segments_per_task(8192, 1024) == 256  # 32 tasks of 256
    assert segments_per_task(10_000, 1024) == 313  # 32 tasks, of 313 segments but the last
    assert segments_per_task(32_768, 1024) == 1024
    assert segments_per_task(10**6, 1024) == 1024  # 977 tasks, not 3907
    assert segments_per_task(10**6, 16) == 16  # `plan --task-segments 16`: at most that, on any log dir
    assert segments_per_task(10**6, 4096) == 4096


def _many_tiny_segments(log_dir: Path, partitions: int, segments: int) -> None:
    """``partitions`` x ``segments`` v0 segments of one message each (the same bytes per position)."""
    write_broker_files(log_dir, [PartitionFiles(TOPIC, p, segments) for p in range(partitions)])
    bodies = [gen.legacy_messages(k, 1, key_bytes=2, value_bytes=2, magic=0, seed=1) for k in range(segments)]
    for p in range(partitions):
        for k, body in enumerate(bodies):
            path = log_dir / f"{TOPIC}-{p}" / segment_name(k, ".log")
            path.write_bytes(body)
            os.utime(path, ns=(MTIME_NS, MTIME_NS))


def test_a_log_dir_of_ten_thousand_tiny_segments_gets_32_tasks_and_every_segment_once(tmp_path):
    log_dir = tmp_path / "kafka-logs"
    _many_tiny_segments(log_dir, 100, 100)
    # the columnar form, a big log dir's (`plan -o plan.parquet`); the JSON form's tasks are cut by the same code
    plan = build_plan(
        PlanRequest(log_dirs=(str(log_dir),), allow_unclean=True, options=ConvertOptions(), form=PlanForm.COLUMNAR)
    )
    sizes = [len(t.segments) for t in plan.tasks]
    assert sizes == [313] * 31 + [10_000 - 31 * 313]
    held = [(ref.partition, ref.base_offset) for t in plan.tasks for ref in t.segments]
    assert len(set(held)) == len(held) == 10_000
    assert held[:2] == [(f"{TOPIC}-0", 0), (f"{TOPIC}-0", 1)] and held[-1] == (f"{TOPIC}-99", 99)
