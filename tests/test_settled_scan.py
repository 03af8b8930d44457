"""The compiled settled-partition scan (``migrate/run/_settled.c``) and its Python twin
(``migrate.run.swap_status._scan_reference``) give the same answer for every record and every file state, and the
compiled one reads nothing outside the strings it is given: fuzzed here directly with mutated records, swap texts and
pieces over real files."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migrate import extensions
from migrate.run import swap_status
from migrate.run.swap_status import _scan_reference

_settled, _status = extensions.load("migrate.run._settled")
pytestmark = pytest.mark.skipif(_settled is None, reason=f"C accelerator not in use: {_status.reason}")

PLAN_ID = "0123456789abcdef"
EDGES = "0f" * 32


def _stat_text(path: str) -> str:
    st_ = os.stat(path)
    return json.dumps({"inode": st_.st_ino, "size": st_.st_size, "mtime_ns": st_.st_mtime_ns}, separators=(",", ":"))


def _partition(root: str, bases: list[int], split_at: int | None = None) -> tuple[str, list, str]:
    """A partition dir whose files are each segment's swapped-in outputs, and the record and database rows that a
    swap of them writes: (prefix, known, text after the head)."""
    part = os.path.join(root, "t-0")
    os.makedirs(part, exist_ok=True)
    known, items = [], []
    for base in bases:
        files = []
        for suffix in (".log", ".index", ".timeindex"):
            path = os.path.join(part, f"{base:020d}{suffix}")
            with open(path, "wb") as f:
                f.write(b"x" * (base % 7))
            files.append({"suffix": suffix, "original": None, "output": json.loads(_stat_text(path))})
        if split_at is not None:  # a split source's later output, named by its own base offset
            path = os.path.join(part, f"{split_at:020d}.log")
            with open(path, "wb") as f:
                f.write(b"y")
            files.append(
                {"suffix": ".log", "original": None, "output": json.loads(_stat_text(path)), "base_offset": split_at}
            )
        swap = json.dumps(files, separators=(",", ":"))
        result = json.dumps({"base_offset": base, "status": "converted"}, separators=(",", ":"))
        piece = f'{{"base_offset":{base},"files":{swap},"result":{result},"log_edges":"'
        known.append((base, swap, piece))
        items.append(f'{piece}{EDGES}"}}')
    return os.path.join(part, ""), known, ",".join(items) + "]}"


def _both(text: str, prefix: str, known: list):
    compiled = _settled.settled_scan(text, 0, prefix, known)
    if compiled is NotImplemented:
        return None
    assert compiled == _scan_reference(text, 0, prefix, known)
    return compiled


def test_a_swapped_partition_is_converted_by_both(tmp_path):
    prefix, known, text = _partition(str(tmp_path), [0, 10, 25])
    assert _both(text, prefix, known) == (9, 0, [EDGES] * 3)


def test_a_split_sources_later_output_is_stated_by_its_own_name(tmp_path):
    prefix, known, text = _partition(str(tmp_path), [0], split_at=500)
    assert _both(text, prefix, known) == (4, 0, [EDGES])
    os.unlink(os.path.join(prefix, f"{500:020d}.log"))
    assert _both(text, prefix, known) is None


def test_a_changed_or_missing_file_is_not_settled(tmp_path):
    prefix, known, text = _partition(str(tmp_path), [0, 10])
    os.utime(os.path.join(prefix, f"{10:020d}.index"), ns=(1, 1))
    assert _both(text, prefix, known) is None
    prefix, known, text = _partition(str(tmp_path), [0, 10])
    os.unlink(os.path.join(prefix, f"{0:020d}.timeindex"))
    assert _both(text, prefix, known) is None


def test_non_ascii_is_left_to_the_twin(tmp_path):
    prefix, known, text = _partition(str(tmp_path), [0])
    assert _settled.settled_scan(text + "é", 0, prefix, known) is NotImplemented
    assert _settled.settled_scan(text, 0, prefix + "é/", known) is NotImplemented


def test_callers_mistakes_are_refused(tmp_path):
    prefix, known, text = _partition(str(tmp_path), [0])
    with pytest.raises(ValueError, match="position"):
        _settled.settled_scan(text, len(text) + 1, prefix, known)
    with pytest.raises(ValueError, match="position"):
        _settled.settled_scan(text, -1, prefix, known)
    with pytest.raises(TypeError, match="tuple"):
        _settled.settled_scan(text, 0, prefix, [[0, "", ""]])
    with pytest.raises(TypeError, match="str"):
        _settled.settled_scan(text, 0, prefix, [(0, b"", "")])
    with pytest.raises(ValueError, match="null"):
        _settled.settled_scan(text, 0, prefix + "\0", known)
    with pytest.raises(TypeError):
        _settled.settled_scan(text, 0, prefix, tuple(known))


_EDIT = st.tuples(st.sampled_from(["flip", "cut", "insert", "delete"]), st.integers(0, 10**6), st.text(max_size=3))


def _mutate(s: str, edits: list) -> str:
    for kind, at, extra in edits:
        at = at % (len(s) + 1)
        if kind == "flip" and at < len(s):
            s = s[:at] + chr((ord(s[at]) + 1 + len(extra)) % 128) + s[at + 1 :]
        elif kind == "cut":
            s = s[:at]
        elif kind == "insert":
            s = s[:at] + extra + s[at:]
        elif kind == "delete":
            s = s[:at] + s[at + 1 + len(extra) :]
    return s


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bases=st.lists(st.integers(0, 2**40), min_size=1, max_size=4, unique=True).map(sorted),
    target=st.sampled_from(["text", "swap", "piece", "base", "none"]),
    which=st.integers(0, 3),
    edits=st.lists(_EDIT, min_size=1, max_size=3),
    split=st.booleans(),
)
def test_fuzzed_records_get_one_answer_from_both(tmp_path_factory, bases, target, which, edits, split):
    prefix, known, text = _partition(str(tmp_path_factory.mktemp("p")), bases, split_at=2**41 if split else None)
    i = which % len(known)
    base, swap, piece = known[i]
    if target == "text":
        text = _mutate(text, edits)
    elif target == "swap":
        known[i] = (base, _mutate(swap, edits), piece)
    elif target == "piece":
        known[i] = (base, swap, _mutate(piece, edits))
    elif target == "base":
        known[i] = (edits[0][1] - 2**63 if edits[0][0] == "flip" else True, swap, piece)
    else:
        known[i] = (base, swap, None)
    _both(text, prefix, known)


def test_the_scan_in_use_is_the_compiled_one():
    assert swap_status._scan is _settled.settled_scan
