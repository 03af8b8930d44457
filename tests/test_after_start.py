"""After the swap the broker owns the files: finalize, verify and rollback judge a converted partition the way Kafka's
own recovery would, after the broker's own operations (tests/broker_life.py does each as Kafka's code does it):
a start and a clean stop, appends, a roll, a follower's truncation, the cleaner's merge, retention; and a converted
closed segment changed by hand is still refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from broker_life import append, clean, delete_oldest, roll, start_and_stop, truncate_to
from conftest import run_cli
from kafka_layout import make_broker_logdir
from runs import make_plan, snapshot

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.kafka.names import segment_name

PARTITIONS = ["plain-v0-0", "compacted-v0-0", "lz4-v1-0"]


@pytest.fixture
def migrated(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    before = snapshot(broker)
    assert pipeline.execute(plan, SerialEngine()).ok
    return broker, plan_path, before


def bases(part: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in part.glob("*.log"))


def partitions_of(snap: dict) -> dict:
    return {k: v for k, v in snap.items() if "/" in k and k.split("/")[0] in PARTITIONS}


def test_a_start_and_a_clean_stop_change_only_metadata_and_finalize_deletes_the_originals(migrated, capsys):
    """The real broker's first case: started on the converted data and stopped cleanly, with no client at all."""
    broker, plan_path, _ = migrated
    start_and_stop(broker)
    active_index = broker / "plain-v0-0" / segment_name(bases(broker / "plain-v0-0")[-1], ".index")
    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    assert "OK: every converted segment is exact" in ran.text and "same bytes, another mtime or inode" in ran.text, (
        ran.text
    )
    assert str(active_index) in ran.text or "file(s), e.g." in ran.text
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    assert "originals of 3 partitions deleted" in ran.text, ran.text
    assert not list(broker.rglob(".kafka-log-migrate-*/"))


def test_a_rollback_after_a_start_loses_nothing_and_needs_no_force(migrated, capsys):
    broker, plan_path, before = migrated
    start_and_stop(broker)
    ran = run_cli(capsys, "rollback", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    assert partitions_of(snapshot(broker)) == partitions_of(before)  # every original file back, bytes and mtimes


def test_appends_a_roll_a_cleaner_merge_and_retention_are_the_brokers(migrated, capsys):
    broker, plan_path, _before = migrated
    plain, compacted, lz4 = (broker / name for name in PARTITIONS)
    start_and_stop(broker)
    appended = append(plain, 20)
    rolled = roll(plain)
    append(plain, 5)
    merged = clean(compacted, bases(compacted)[:2])
    gone = delete_oldest(lz4)
    start_and_stop(broker)

    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 5, ran.text
    assert "TAKEN OVER" in ran.text and "differs:" not in ran.text, ran.text
    assert f"appended: offsets {appended[0]}..{appended[-1]}" in ran.text, ran.text
    assert f"{plain}/{segment_name(rolled, '.log')}: new: a segment rolled since" in ran.text, ran.text
    assert f"{merged}: replaced" in ran.text, ran.text
    assert (
        f"{lz4}/{segment_name(gone, '.log')}: deleted: before the log's start now: deleted by retention" in ran.text
    ), ran.text

    ran = run_cli(capsys, "rollback", "--plan", str(plan_path))
    assert ran.code == 1 and "would lose" in ran.text, ran.text
    assert f"appended: offsets {appended[0]}..{appended[-1]}" in ran.text and f"{merged}: replaced" in ran.text, (
        ran.text
    )

    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    for line in ("plain-v0-0: ", "compacted-v0-0: ", "lz4-v1-0: "):
        assert line in ran.text, ran.text
    assert "appended" in ran.text and "replaced" in ran.text and "deleted" in ran.text and "new" in ran.text, ran.text
    assert not list(broker.rglob(".kafka-log-migrate-*/"))
    assert bases(plain)[-1] == rolled and merged.exists()


def test_a_followers_truncation_and_fetch_again_are_the_brokers(migrated, capsys):
    broker, plan_path, _ = migrated
    plain = broker / "plain-v0-0"
    last = bases(plain)[-1]
    start_and_stop(broker)
    truncate_to(plain, last + 5)  # the leader agrees up to 5 records into the last segment
    append(plain, 12, value=b"fetched from the leader")
    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 5, ran.text
    assert f"{plain}/{segment_name(last, '.log')}: " in ran.text and (
        "truncated" in ran.text or "appended" in ran.text
    ), ran.text
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 0, ran.text


def test_a_truncation_into_a_closed_segment_deletes_the_later_ones_as_the_broker(migrated, capsys):
    broker, plan_path, _ = migrated
    plain = broker / "plain-v0-0"
    first, *later = bases(plain)
    assert later
    start_and_stop(broker)
    truncate_to(plain, first + 3)
    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 5, ran.text
    assert f"{plain}/{segment_name(first, '.log')}: truncated" in ran.text, ran.text
    assert f"{plain}/{segment_name(later[-1], '.log')}: deleted: after the log's end now" in ran.text, ran.text
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 0, ran.text


def test_a_converted_closed_segment_gone_from_the_middle_of_a_log_that_is_not_compacted_stops_finalize(
    migrated, capsys
):
    broker, plan_path, _ = migrated
    plain = broker / "plain-v0-0"
    middle = bases(plain)[1]
    start_and_stop(broker)
    (plain / segment_name(middle, ".log")).unlink()  # not retention (not the oldest), not the cleaner (not compacted)
    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 3 and "gone from the middle of the log" in ran.text, ran.text
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 1 and str(plain / segment_name(middle, ".log")) in ran.text, ran.text
    assert list(broker.rglob(".kafka-log-migrate-*/original")), "an original was deleted"


def test_a_failed_verify_since_the_swap_blocks_finalize_until_a_verify_passes(tmp_path, capsys):
    """Rot in the middle of a large converted segment: its size and edges are intact (finalize's own judgement sees
    nothing), its CRCs are not. The verify that reads it whole fails, and finalize refuses, naming that verify, until
    a verify passes."""
    from prestage_layout import broker_log_dir

    log_dir = broker_log_dir(tmp_path / "data", partitions=1, segments=2, records=3000)
    plan, plan_path = make_plan(tmp_path, log_dir)
    assert pipeline.execute(plan, SerialEngine()).ok
    victim = log_dir / "t-0" / segment_name(0, ".log")
    st = victim.stat()
    assert st.st_size > 3 * 64 * 1024  # the edges are 64 KiB at each end: the middle is past both
    middle = st.st_size // 2
    good = victim.read_bytes()[middle : middle + 1]
    with open(victim, "r+b") as f:
        f.seek(middle)
        f.write(bytes([good[0] ^ 0x01]))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 3, ran.text
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 1 and "the verify at" in ran.text and "difference(s)" in ran.text, ran.text
    with open(victim, "r+b") as f:  # repaired (from a replica, say)
        f.seek(middle)
        f.write(good)
    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 0, ran.text


def test_a_damaged_converted_segment_of_a_compacted_partition_is_damage_not_a_cleaner_merge(migrated, capsys):
    """A checksum that fails is no broker operation, not even in a compacted partition whose cleaner may rewrite a
    segment under its name: verify and finalize refuse it, and rollback puts the original back with no --force
    (the original holds those records whole)."""
    broker, plan_path, before = migrated
    compacted = broker / "compacted-v0-0"
    victim = compacted / segment_name(bases(compacted)[0], ".log")
    start_and_stop(broker)
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01  # the last record's value: the last batch's CRC-32C no longer holds
    victim.write_bytes(bytes(data))
    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 3 and str(victim) in ran.text and "CRC-32C mismatch" in ran.text and "cleaner" not in ran.text, (
        ran.text
    )
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 1 and str(victim) in ran.text, ran.text
    ran = run_cli(capsys, "rollback", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    assert partitions_of(snapshot(broker)) == partitions_of(before)
