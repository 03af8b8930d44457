"""plans/ stays true to the code: the example and every plan the code writes validate against plans/plan.schema.json."""

from __future__ import annotations

import json

import jsonschema
from conftest import REPO
from kafka_layout import make_broker_logdir

from migrate.plan import PlanRequest, build_plan, load_plan
from migrate.segment.task import ConvertOptions

SCHEMA = json.loads((REPO / "plans" / "plan.schema.json").read_text())


def test_the_example_plan_is_valid():
    example = load_plan(REPO / "plans" / "example-plan.json")
    jsonschema.validate(example, SCHEMA)
    assert example["log_dirs"][0]["partitions"][0]["segments"][0]["file"].endswith(".log")


def test_plans_the_code_writes_are_valid(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-0", "lz4-v1-1"])
    for options in (ConvertOptions(), ConvertOptions(target_magic=1, timestamps="none", compression="gzip")):
        plan = build_plan(PlanRequest(log_dirs=[str(log_dir)], options=options, leader_epoch=3))
        jsonschema.validate(plan, SCHEMA)
        assert {p["leader_epoch"] for d in plan["log_dirs"] for p in d["partitions"]} == {3}
