"""The plan's columnar form as a file: one Parquet file, the plan's head as JSON in its key-value metadata and one
row per segment (the layout is in ``migrate.model.plan_columns``).

A plan is bytes from disk: cut short by a full disk, damaged by a bad copy, edited by hand. Every way a damaged file
makes pyarrow, json or numpy fail is turned here into the tool's own ModelError naming the file and what is wrong;
the plan's id then refuses any edit that still parses.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from migrate.codec import from_json, to_json
from migrate.errors import ModelError
from migrate.model.plan_columns import (
    HEAD_KEY,
    INT_COLUMNS,
    NAME_COLUMNS,
    PARQUET_MAGIC,
    PlanHead,
    SegmentColumns,
    SegmentExtra,
    columns_of,
    head_of,
    plan_id_of,
    plan_of,
)
from migrate.model.plan_tree import PLAN_VERSION, Plan


def _columns_table(columns: SegmentColumns) -> Any:
    import pyarrow as pa

    arrays: dict[str, Any] = {}
    for column in NAME_COLUMNS:
        values, codes = columns.names[column]
        arrays[column] = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(values, pa.string()))
    for column, _ in INT_COLUMNS:
        arrays[column] = pa.array(columns.ints[column])
    extra: list[str | None] = [None] * len(columns)
    for row, text in columns.extra.items():
        extra[row] = text
    arrays["extra"] = pa.array(extra, pa.string())
    return pa.table(arrays)


def _parquet_bytes(table: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    # dictionary pages for every column (partition-level columns repeat, counts and sizes recur) and zstd: about
    # 2 bytes a segment, read back in about 0.4 s per million rows here
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def dump_plan_parquet(plan: Plan) -> bytes:
    columns = columns_of(plan)
    head = head_of(plan, columns)
    table = _columns_table(columns).replace_schema_metadata(
        {HEAD_KEY: json.dumps(to_json(head), separators=(",", ":"))}
    )
    return _parquet_bytes(table)


def _read_columns(data: bytes, source: str) -> tuple[SegmentColumns, dict[bytes, bytes]]:
    """The plan's columns, decoded one at a time into arrays numpy owns: a whole-table read leaves Arrow's pool
    holding its decode buffers (about 300 B a segment on top of the 130 the columns need, 0.4 GB at 10^6 in the
    driver), and the dataset layer ``read_table`` imports costs every verb 0.16 s."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pool = pa.default_memory_pool()
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        present = parquet.schema_arrow.names
        metadata = parquet.schema_arrow.metadata or {}
        rows = parquet.metadata.num_rows
        expected = set(NAME_COLUMNS) | {c for c, _ in INT_COLUMNS} | {"extra"}
        if set(present) != expected:
            raise ModelError(f"{source}: its columns are {sorted(present)}, not a plan's {sorted(expected)}")
        names: dict[str, tuple[list[str], np.ndarray]] = {}
        ints: dict[str, np.ndarray] = {}
        extra: dict[int, str] = {}
        for column in present:
            chunked = parquet.read(columns=[column], use_threads=False).column(0)
            if chunked.null_count and column != "extra":
                raise ModelError(f"{source}: column {column} has empty cells")
            if column in NAME_COLUMNS:
                if not rows:
                    names[column] = ([], np.zeros(0, dtype=np.int32))
                    continue
                combined = chunked.combine_chunks()
                array = combined if isinstance(combined, pa.DictionaryArray) else combined.dictionary_encode()
                values = array.dictionary.to_pylist()
                codes = np.array(array.indices.to_numpy(), dtype=np.int32)
                if not all(type(v) is str for v in values) or (
                    len(codes) and not 0 <= codes.min() <= codes.max() < len(values)
                ):
                    raise ModelError(f"{source}: column {column} holds something other than names")
                names[column] = (values, codes)
            elif column == "extra":
                if chunked.null_count != rows:
                    valid = np.flatnonzero(chunked.is_valid().to_numpy(zero_copy_only=False))
                    extra = dict(zip(valid.tolist(), chunked.take(valid).to_pylist(), strict=True))
            else:
                ints[column] = np.array(chunked.to_numpy(), dtype=dict(INT_COLUMNS)[column])
            del chunked
            pool.release_unused()
    except (*_DECODE_ERRORS, pa.ArrowException) as exc:
        raise ModelError(f"{source}: not a readable columnar plan ({type(exc).__name__}: {exc})") from exc
    return SegmentColumns(names, ints, extra, data), metadata


# what a damaged Parquet file makes pyarrow, json and numpy raise while a plan is read from it (pyarrow's own errors
# are ValueErrors, OSErrors or NotImplementedErrors; a damaged footer also gives KeyError and UnicodeDecodeError)
_DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, OverflowError, OSError, NotImplementedError)


def load_plan_parquet(data: bytes, source: str = "plan") -> Plan:
    """A columnar plan from its bytes, checked against its own head and id; ModelError (naming ``source`` and what
    is wrong) for anything else, damaged bytes included."""
    try:
        return _load_plan_parquet(data, source)
    except ModelError:
        raise
    except _DECODE_ERRORS as exc:
        raise ModelError(f"{source}: not a readable columnar plan ({type(exc).__name__}: {exc})") from exc


def _load_plan_parquet(data: bytes, source: str) -> Plan:
    columns, metadata = _read_columns(data, source)
    if HEAD_KEY not in metadata:
        raise ModelError(f"{source}: a Parquet file without a kafka-log-migrate plan head")
    try:
        raw = json.loads(metadata[HEAD_KEY])
    except ValueError as exc:
        raise ModelError(f"{source}: its plan head is not JSON ({exc})") from exc
    if isinstance(raw, dict) and raw.get("version") != PLAN_VERSION:
        raise ModelError(
            f"{source}: plan version {raw.get('version')!r}; this kafka-log-migrate reads version {PLAN_VERSION}. "
            "Re-plan with this version's `kafka-log-migrate plan`."
        )
    head = from_json(PlanHead, raw, "plan head")
    if columns.digest != head.segment_digest:
        raise ModelError(
            f"{source}: its segment table no longer matches the plan's head (edited after it was made). A plan is "
            "reviewed, not edited: re-plan with `kafka-log-migrate plan`"
        )
    for row, text in columns.extra.items():  # decoded once here: a stage meets none it cannot read
        from_json(SegmentExtra, json.loads(text), f"{source}: segment row {row}")
    plan = plan_of(head, columns)
    plan.check_integrity(plan_id_of)
    return plan


def is_columnar(first_bytes: bytes) -> bool:
    return first_bytes[:4] == PARQUET_MAGIC
