"""fast_replace and fast_new give the records dataclasses.replace and the class's own call give, and refuse a class
whose __init__ does more than set fields."""

from __future__ import annotations

import dataclasses

import pytest

from migrate.errors import ModelError
from migrate.model.plan_tree import CompactionPlan, PartitionPlan
from migrate.model.records import fast_new, fast_replace
from migrate.model.run_state import ConversionStatus, Outcome, SegmentOutcome, SegmentResult


def test_a_fast_copy_is_the_record_replace_gives():
    result = SegmentResult("/k/t-0/00000000000000000000.log", 0, ConversionStatus.CONVERTED, magics_in={"0": 40})
    outcome = SegmentOutcome("/k", "t-0", 0, Outcome.VERIFIED, 6800, 8480, 40, result=result, result_text="{}")
    copy = fast_replace(outcome, result=None, result_text=None)
    assert copy == dataclasses.replace(outcome, result=None, result_text=None)
    assert (copy.records, copy.result, outcome.result) == (40, None, result)  # the original is left as it was
    moved = fast_replace(result, source="/s/00000000000000000000.log", outputs={})
    assert moved == dataclasses.replace(result, source="/s/00000000000000000000.log", outputs={})
    assert moved.magics_in is result.magics_in  # a shallow copy, as replace makes


def test_a_fast_build_is_the_record_the_class_builds():
    fields = dict(
        name="t-0",
        topic="t",
        partition=0,
        dir="/k/t-0",
        dir_mtime_ns=1,
        leader_epoch=3,
        bytes=6800,
        estimated_output_bytes=8480,
        segments=(),
        compaction=None,
    )
    built = fast_new(PartitionPlan, **fields)
    assert built == PartitionPlan(**fields)
    assert built.segment_by_base == {}  # a cached property still has the instance's __dict__


def test_a_class_with_a_post_init_is_refused():
    with pytest.raises(ModelError, match="CompactionPlan is not a plain record"):
        fast_new(CompactionPlan)
