"""The state's JSON text (migrate.codec.dumps_compact, loads_text): orjson where it can, the standard library where
it cannot, and every text parses back to the value written, whichever wrote it."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from migrate.codec import dumps_compact, from_json, loads_text, to_json
from migrate.model.run_state import SegmentResult

# JSON values as the records hold them: no NaN nor infinity (the records are counts, identities and durations)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20
)


@given(_values)
def test_every_text_parses_back_to_the_value_written(value: object) -> None:
    text = dumps_compact(value)
    assert json.loads(text) == value
    assert loads_text(text) == value
    assert loads_text(json.dumps(value, separators=(",", ":"))) == value


def test_an_ascii_record_is_spelled_as_the_standard_library_spells_it() -> None:
    data = {"source": "/data/kafka/t-0/00000000000000000000.log", "magics_in": {"0": 2}, "seconds": 0.0016, "x": None}
    assert dumps_compact(data) == json.dumps(data, separators=(",", ":"))


def test_what_orjson_refuses_goes_through_the_standard_library() -> None:
    # a path that is not UTF-8 decodes to a lone surrogate (os.fsdecode); an int beyond 64 bits; an int key
    for value, text in (
        ({"path": "/d/\udcff.log"}, '{"path":"/d/\\udcff.log"}'),
        ({"n": 2**70}, '{"n":1180591620717411303424}'),
        ({1: 2}, '{"1":2}'),
    ):
        assert dumps_compact(value) == text
        assert loads_text(text) == json.loads(text)
    assert loads_text('{"path":"/d/\\udcff.log"}') == {"path": "/d/\udcff.log"}
    assert math.isnan(loads_text('{"x":NaN}')["x"])


def test_malformed_text_raises_the_standard_librarys_error() -> None:
    with pytest.raises(json.JSONDecodeError, match="Expecting ',' delimiter"):
        loads_text('{"a":1 "b":2}')


def test_a_segment_result_round_trips_through_the_text() -> None:
    result = SegmentResult(source="/data/t-0/00000000000000000000.log", base_offset=0, status="converted")
    result.magics_in["0"] = 2
    result.seconds = 1.5e-05
    text = dumps_compact(to_json(result))
    assert from_json(SegmentResult, loads_text(text)) == result
    assert '"seconds":0.000015' in text  # orjson's spelling; json.dumps writes 1.5e-05, the same float
