"""The vocabulary: plans load strictly, an edited plan is refused, and plans/ is generated from the model."""

from __future__ import annotations

import json

import jsonschema
import pytest
from conftest import REPO

from migrate.codec import from_json, to_json
from migrate.errors import ModelError
from migrate.model.plan_tree import Codec, ConvertOptions, Plan, TimestampPolicy, load_plan_json, plan_schema

EXAMPLE = REPO / "plans" / "example-plan.json"
SCHEMA = json.loads((REPO / "plans" / "plan.schema.json").read_text())


def example() -> dict:
    return json.loads(EXAMPLE.read_text())


def test_the_schema_file_is_generated_from_the_model():
    assert plan_schema() == SCHEMA, "run: python -m migrate.model > plans/plan.schema.json"


def test_the_example_plan_loads_and_validates():
    plan = load_plan_json(EXAMPLE.read_text())
    jsonschema.validate(example(), SCHEMA)
    assert plan.options.timestamps is TimestampPolicy.MTIME
    assert plan.log_dirs[0].partitions[0].segments[0].file.endswith(".log")
    assert to_json(plan) == example()  # load and dump are exact inverses


def test_the_example_cut_over_plan_loads_and_validates():
    text = (REPO / "plans" / "example-cutover-plan.json").read_text()
    jsonschema.validate(json.loads(text), SCHEMA)
    plan = load_plan_json(text)
    (entry,) = plan.log_dirs
    assert entry.staging_dir == "/tmp/klm-example/data/.kafka-log-migrate-staging/kafka" and entry.stopped_at_ns
    staged = [(p.name, s.base_offset) for p in entry.partitions for s in p.segments if s.staged]
    assert staged == [("t-0", 0), ("t-0", 50), ("t-1", 0), ("t-1", 50)]
    assert to_json(plan) == json.loads(text)


def test_an_edited_plan_is_refused_with_advice_to_replan():
    data = example()
    data["log_dirs"][0]["partitions"][0]["leader_epoch"] += 1
    with pytest.raises(ModelError, match=r"was edited after it was made.*re-plan"):
        load_plan_json(json.dumps(data))
    # fields that do not describe the work (when and where it was made) are not part of the id
    data = example()
    data["created"] = "2030-01-01T00:00:00Z"
    assert load_plan_json(json.dumps(data)).plan_id == data["plan_id"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda d: d["options"].update(compression="lz5"),
            r"plan\.options\.compression: 'lz5' is not one of none, gzip",
        ),
        (lambda d: d["options"].update(colour="blue"), r"plan\.options: unknown key 'colour'"),
        (lambda d: d["options"].update(target_magic=3), r"options\.target_magic: must be 1 or 2"),
        (
            lambda d: d["options"].update(pack_bytes="big"),
            r"plan\.options\.pack_bytes: .*fits none|expected an integer",
        ),
        (lambda d: d["log_dirs"][0].pop("partitions"), r"plan\.log_dirs\[0\]: missing key 'partitions'"),
        (lambda d: d["tasks"][0].update(bytes=True), r"plan\.tasks\[0\]\.bytes: expected an integer, found True"),
        (lambda d: d.update(version=1), r"plan version 1; this kafka-log-migrate reads version 2"),
    ],
)
def test_malformed_plans_name_the_offending_value(edit, message):
    data = example()
    edit(data)
    with pytest.raises(ModelError, match=message):
        load_plan_json(json.dumps(data))


@pytest.mark.parametrize(
    ("name", "directory"),
    [
        (None, "/var/lib/other-kafka/orders-0"),  # another log dir's partition
        (None, "{log_dir}/.."),  # the log dir's parent (issue 23: renamed files there and exited 0)
        ("..", "{log_dir}/.."),
        (None, "{log_dir}/orders-0/../../etc"),
        (None, "{log_dir}/orders-0/nested"),
        (None, "{log_dir}//orders-0"),
        ("payments-0", "{log_dir}/orders-0"),  # a name that is not the dir's
        ("not-a-partition", "{log_dir}/not-a-partition"),  # a name Kafka would not load
    ],
)
def test_a_partition_outside_its_log_dir_is_refused_even_with_a_matching_id(name, directory):
    import dataclasses

    data = example()
    part = data["log_dirs"][0]["partitions"][0]
    part["dir"] = directory.format(log_dir=data["log_dirs"][0]["log_dir"])
    if name is not None:
        part["name"] = name
    plan = from_json(Plan, data)
    forged = dataclasses.replace(plan, plan_id=plan.content_id())
    with pytest.raises(ModelError, match="is not the topic-partition directory"):
        forged.check_integrity()


@pytest.mark.parametrize("log_dir", ["var/lib/kafka", "/var/lib/kafka/", "/var/lib/../lib/kafka", "/var/lib/./kafka"])
def test_a_log_dir_that_is_not_an_absolute_normalized_path_is_refused(log_dir):
    import dataclasses

    data = example()
    data["log_dirs"][0]["log_dir"] = log_dir
    data["log_dirs"][0]["key"] = log_dir
    for part in data["log_dirs"][0]["partitions"]:
        part["dir"] = log_dir.rstrip("/") + "/" + part["name"]
    for task in data["tasks"]:
        task["log_dir"] = log_dir
    plan = from_json(Plan, data)
    forged = dataclasses.replace(plan, plan_id=plan.content_id())
    with pytest.raises(ModelError, match="is not an absolute, normalized path"):
        forged.check_integrity()


def test_options_take_enums_and_refuse_what_kafka_cannot_read():
    assert ConvertOptions(timestamps="none").timestamps is TimestampPolicy.NONE
    assert ConvertOptions(compression="zstd").compression is Codec.ZSTD
    with pytest.raises(ModelError, match="zstd needs target magic 2"):
        ConvertOptions(target_magic=1, compression="zstd")
    with pytest.raises(ModelError, match="'lz5' is not one of"):
        ConvertOptions(compression="lz5")


def test_plans_the_code_writes_validate_against_the_schema(tmp_path):
    from kafka_layout import make_broker_logdir

    from migrate.model.plan_tree import dump_plan_json
    from migrate.planning.plan import build_plan
    from migrate.planning.request import PlanRequest

    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-0", "lz4-v1-1"])
    for options in (ConvertOptions(), ConvertOptions(target_magic=1, timestamps="none", compression="gzip")):
        plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), options=options, leader_epoch=3))
        data = json.loads(dump_plan_json(plan))
        jsonschema.validate(data, SCHEMA)
        assert {p["leader_epoch"] for d in data["log_dirs"] for p in d["partitions"]} == {3}
        assert load_plan_json(dump_plan_json(plan)) == plan


def test_the_example_manifest_loads_and_an_edited_one_is_refused():
    from migrate.model.cluster_manifest import load_manifest_json

    text = (REPO / "plans" / "example-cluster.manifest.json").read_text()
    manifest = load_manifest_json(text)
    assert [b.broker_id for b in manifest.brokers] == [1, 2, 3]
    assert manifest.estimates.segments == sum(b.estimates.segments for b in manifest.brokers) == 600000
    data = json.loads(text)
    data["brokers"][1]["sha256"] = "0" * 64
    with pytest.raises(ModelError, match="was edited after it was made"):
        load_manifest_json(json.dumps(data))
