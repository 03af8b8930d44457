"""The layout by role (issue 22) changed no byte: every fixture segment converts to exactly the files it converted to
before it (``fixture_output_digests.json``: the sha256 of each output, made by d71b08b, the last commit before the
layout moved, with the same default options and the fixtures' own mtimes)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, LEGACY_LOGDIR

from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import SegmentTask
from migrate.segment.convert import convert_segment

GOLDEN = json.loads((Path(__file__).parent / "fixture_output_digests.json").read_text())
MTIMES = json.loads((FIXTURES / "mtimes.json").read_text())


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_every_fixture_converts_to_the_bytes_it_did_before_the_layout_moved(name, tmp_path):
    source = tmp_path / name
    source.parent.mkdir()
    shutil.copyfile(LEGACY_LOGDIR / name, source)
    os.utime(source, ns=(MTIMES[name] * 1_000_000,) * 2)  # v0 timestamps come from it (--timestamps mtime)
    try:
        result = convert_segment(
            SegmentTask(str(source), str(tmp_path / "staged"), int(source.stem), ConvertOptions(truncate_tail=False))
        )
    except Exception as exc:
        assert GOLDEN[name] == f"refused: {type(exc).__name__}"
        return
    digests = {sfx: hashlib.sha256(Path(p).read_bytes()).hexdigest() for sfx, p in sorted(result.outputs.items())}
    assert (digests or result.status.value) == GOLDEN[name]
