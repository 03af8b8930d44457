"""What older code wrote still reads, and is written again byte for byte: a segment's files are a ``SegmentFiles``
record in the code, and the suffix-keyed objects they always were in the state database, the staged records and the
staged index.

``fixture_wire_results.json`` was written by the code before ``SegmentFiles`` (commit ``made_by``, whose ``migrate``
is main's 5df1b9a): the result texts of a state database (a cold run with a split source, its ``parts``, and a
cut-over that took staged segments verbatim and converted the window's), the ``.prestaged.json`` records of a
pre-stage pass and its partitions' ``staged-index.bin`` files (base64).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from migrate.codec import dumps_compact, from_json, loads_text, to_json
from migrate.errors import ModelError
from migrate.kafka.names import FileKind
from migrate.model.run_state import FileStat, SegmentResult
from migrate.model.segment_files import SegmentFiles
from migrate.prestage.record import StagedRecord, _encode
from migrate.prestage.staged_index import decode_index, row_live_before, row_staged, row_verbatim
from migrate.run.partition.sources import result_facts, strict

FIXTURE = json.loads((Path(__file__).parent / "fixture_wire_results.json").read_text())
STATE = FIXTURE["state_results"]
RECORDS = FIXTURE["staged_records"]
INDEXES = FIXTURE["staged_indexes"]


@pytest.mark.parametrize("row", STATE, ids=[f"{r['partition']}-{r['base']}" for r in STATE])
def test_a_stored_result_decodes_into_segment_files_and_encodes_to_the_same_text(row):
    text = row["text"]
    result = from_json(SegmentResult, loads_text(text))
    assert isinstance(result.outputs, SegmentFiles) and isinstance(result.live_before, SegmentFiles)
    assert result.outputs.kinds() == (FileKind.LOG, FileKind.INDEX, FileKind.TIME_INDEX)
    assert result.outputs.log == json.loads(text)["outputs"][".log"]
    assert isinstance(result.output_stats.log, FileStat)
    if result.parts is None:  # a split source's output_bytes count every part's .log
        assert result.output_stats.log.size == result.output_bytes
    for part in result.parts or ():
        assert part.outputs.kinds() == (FileKind.LOG, FileKind.INDEX, FileKind.TIME_INDEX)
    assert dumps_compact(to_json(result)) == text
    # the swap's fast reading of the same text agrees with the strict decoder
    assert result_facts(row["base"], text) == strict(row["base"], text)


def test_the_fixture_holds_a_split_source_and_taken_and_converted_cut_over_segments():
    texts = [json.loads(r["text"]) for r in STATE]
    assert any(t.get("parts") for t in texts)
    assert any(".kafka-log-migrate-staging" in t["outputs"][".log"] for t in texts)  # taken verbatim from staging
    assert any(".kafka-log-migrate-staging" not in t["outputs"][".log"] for t in texts)  # converted in the window


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_staged_record_decodes_and_encodes_to_the_same_bytes(name):
    text = RECORDS[name]
    record = from_json(StagedRecord, json.loads(text), name)
    assert record.staged.kinds() == (FileKind.LOG, FileKind.INDEX, FileKind.TIME_INDEX)
    assert record.result.live_before.kinds() == (FileKind.LOG,)  # the sources had no index files
    assert _encode(record) == text.encode()


@pytest.mark.parametrize("partition", sorted(INDEXES))
def test_a_staged_index_reads_its_rows_and_result_texts_as_written(partition):
    data = base64.b64decode(INDEXES[partition]["bytes"])
    index = decode_index(data, partition)
    assert len(index.by_base) == 2
    for base, row in index.by_base.items():
        text = index.text(row)
        result = from_json(SegmentResult, loads_text(text))
        assert dumps_compact(to_json(result)) == text
        assert row_verbatim(row)
        assert row_live_before(row) == result.live_before
        staged = row_staged(row)
        assert staged.kinds() == result.outputs.kinds()
        assert result.output_stats == staged.map(lambda _, i: FileStat(i.inode, i.size, i.mtime_ns))
        assert result_facts(base, text).outputs == result.outputs


def test_empty_files_and_a_transaction_index_keep_their_wire_form():
    assert to_json(SegmentFiles()) == {}
    files = SegmentFiles(log="a.log", txn_index="a.txnindex")
    assert list(to_json(files)) == [".log", ".txnindex"]
    assert from_json(SegmentFiles[str], {".txnindex": "a.txnindex", ".log": "a.log"}) == files
    assert list(files) == [(FileKind.LOG, "a.log"), (FileKind.TXN_INDEX, "a.txnindex")]


def test_a_key_that_is_no_segment_files_suffix_is_refused_with_its_path():
    data = json.loads(STATE[0]["text"])
    data["outputs"][".snapshot"] = "x"
    with pytest.raises(ModelError, match=r"^row\.outputs: '\.snapshot' is not the suffix of a segment's file"):
        from_json(SegmentResult, data, "row")
    with pytest.raises(ModelError, match="is not readable"):
        result_facts(0, json.dumps(data)[:-1])
    data["outputs"] = {".log": 1}
    with pytest.raises(ModelError, match=r"row\.outputs\.\.log: expected a string, found 1"):
        from_json(SegmentResult, data, "row")
