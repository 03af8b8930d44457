"""A partition's staged index (``staged-index.bin``) only saves reads: the records stay the truth. A damaged,
missing or stale index gives the same plan and the same cut-over as the records alone; an index forged whole (its
digest recomputed) is taken, as the records are, and finalize's proof refuses what it does not prove."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from prestage_layout import broker_log_dir, read_index_at
from runs import assert_scan_agrees

from migrate import pipeline
from migrate.cli import main
from migrate.engines import SerialEngine
from migrate.errors import ModelError
from migrate.kafka.names import segment_name
from migrate.planning.plan import load_plan
from migrate.prestage.controls import Controls
from migrate.prestage.location import default_staging_root
from migrate.prestage.passes import PrestageRequest, run_prestage
from migrate.prestage.staged_index import INDEX_NAME, decode_index, encode_index


def _prestage(log_dir: Path) -> None:
    run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), Controls())


def _plan(log_dir: Path, path: Path) -> dict:
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(path)]) == 0
    data = json.loads(path.read_text())  # the partitions as planned: every segment, staged or not, and its record
    return {"partitions": [d["partitions"] for d in data["log_dirs"]], "estimates": data["estimates"]}


def _staged(log_dir: Path) -> Path:
    return default_staging_root(log_dir) / "t-0"


@pytest.mark.parametrize("damage", ["flipped", "truncated", "gone", "foreign"])
def test_a_damaged_or_missing_index_gives_the_plan_the_records_give(tmp_path, damage):
    log_dir = broker_log_dir(tmp_path / "data", partitions=2, segments=3)
    _prestage(log_dir)
    index = _staged(log_dir) / INDEX_NAME
    assert read_index_at(_staged(log_dir)).rows["base"].tolist() == [0, 100]  # the closed segments, staged
    with_index = _plan(log_dir, tmp_path / "a.json")
    data = index.read_bytes()
    if damage == "flipped":
        index.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif damage == "truncated":
        index.write_bytes(data[: len(data) // 2])
    elif damage == "gone":
        index.unlink()
    else:  # another partition's index, whole and valid, under this one's name
        shutil.copy(_staged(log_dir).parent / "t-1" / INDEX_NAME, index)
    assert _plan(log_dir, tmp_path / "b.json") == with_index
    report = pipeline.execute(load_plan(tmp_path / "b.json"), SerialEngine())
    assert report.ok and report.cutover is not None and report.cutover.staged_segments == 4, report
    assert_scan_agrees(load_plan(tmp_path / "b.json"), report)


def test_a_damaged_index_is_refused_with_its_byte_position():
    with pytest.raises(ModelError, match=r"staged-index.bin: not a staged index of this version \(byte position 0\)"):
        decode_index(b"KLMSIDX\x02" + bytes(40), "staged-index.bin")
    good = encode_index("t-0", "/s/t-0", [])
    with pytest.raises(ModelError, match=r"its digest does not match its bytes \(byte position \d+\)"):
        decode_index(good[:-1] + bytes([good[-1] ^ 1]), "staged-index.bin")


def test_a_forged_index_is_taken_but_finalize_refuses_and_rollback_restores(tmp_path, capsys):
    """The strong attacker, through the index: a staged .log replaced by another valid converted segment (another
    partition's, same base offset), and the index rewritten whole (its digest recomputed) so that its row names the
    forgery's stats and result, the record file left as it was. Execute takes the row without reading the forgery,
    as designed; finalize reads the original again and refuses; rollback restores every original."""
    log_dir = broker_log_dir(tmp_path / "data", partitions=2, segments=3)
    _prestage(log_dir)
    originals = {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()}
    victim, donor = _staged(log_dir), _staged(log_dir).parent / "t-1"
    index, donor_index = read_index_at(victim), read_index_at(donor)
    rows = np.array(index.rows)
    (at,) = np.flatnonzero(rows["base"] == 100)
    (donor_at,) = np.flatnonzero(donor_index.rows["base"] == 100)
    for sfx, k in ((".log", "log"), (".index", "index"), (".timeindex", "timeindex")):
        forged = victim / segment_name(100, sfx)
        forged.unlink()
        shutil.copy2(donor / segment_name(100, sfx), forged)
        st = forged.stat()
        for field, value in (
            ("ino", st.st_ino),
            ("size", st.st_size),
            ("mtime", st.st_mtime_ns),
            ("ctime", st.st_ctime_ns),
        ):
            rows[f"{k}_{field}"][at] = value
    texts = []
    for i, row in enumerate(rows.tolist()):
        text = json.loads(index.text(row))
        if i == at:
            donor_text = json.loads(donor_index.text(donor_index.rows.tolist()[donor_at]))
            for key in ("source_digest", "output_digest_ts", "records", "output_bytes", "output_digests"):
                text[key] = donor_text[key]
            text["output_stats"] = {
                sfx: {**st, "inode": int(rows[f"{sfx[1:]}_ino"][at]), "mtime_ns": int(rows[f"{sfx[1:]}_mtime"][at])}
                for sfx, st in donor_text["output_stats"].items()
            }
        texts.append((rows[i : i + 1].copy(), json.dumps(text, separators=(",", ":")).encode()))
    (victim / INDEX_NAME).write_bytes(encode_index("t-0", str(victim), texts))
    assert read_index_at(victim).rows["log_ino"][at] == (victim / segment_name(100, ".log")).stat().st_ino
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) == 0
    plan = load_plan(plan_path)
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok and report.cutover is not None and report.cutover.staged_segments == 4, report
    assert_scan_agrees(plan, report)
    capsys.readouterr()
    captured = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert captured.code == 1
    err = captured.out + captured.err
    assert "refusing to finalize" in err and "partition t-0" in err and segment_name(100, ".log") in err, err
    assert "Nothing was deleted" in err
    assert main(["rollback", "--plan", str(plan_path)]) == 0
    assert {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()} == originals
