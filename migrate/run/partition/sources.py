"""What a converted segment's stored result says of the files its partition's swap touches, read from the state
database's text without decoding the whole result.

    SegmentResult (as ``migrate.codec`` writes it, its SegmentFiles as suffix-keyed objects; only these fields
    are read here):
    {"outputs": {suffix: path}, "live_before": {suffix: {"inode": int, "size": int, "mtime_ns": int}},
     "source_ctime_ns": int, "parts": [{"base_offset": int, "outputs": {suffix: path}}, ...] | absent}

The swap reads the result of every verified segment of a partition: 10^5 and more in a cut-over's window. The codec's
strict decoder builds every field's record (about 100 us a result); the swap needs four of them. ``result_facts``
reads those four from the same text with orjson (a few us) and is tested against the strict decoder on every result
the tests produce; anything it does not find as written here is the strict decoder's to refuse (``strict``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from migrate.codec import from_json
from migrate.errors import ModelError
from migrate.kafka.names import segment_name
from migrate.model.run_state import FileStat, SegmentResult
from migrate.model.segment_files import SegmentFiles


@dataclass(frozen=True)
class ResultFacts:
    base_offset: int
    outputs: SegmentFiles[str]  # the outputs' paths where they were written
    live_before: SegmentFiles[FileStat]  # the live files it replaces, as they were converted
    source_ctime_ns: int
    part_names: tuple[str, ...]  # the file names of a split source's outputs after the first

    def output_names(self) -> list[str]:
        return [segment_name(self.base_offset, kind) for kind, _ in self.outputs] + list(self.part_names)


def strict(base_offset: int, text: str) -> ResultFacts:
    """The same facts through the codec's strict decoder (ModelError where the text is not a SegmentResult)."""
    result = from_json(SegmentResult, orjson.loads(text))
    return ResultFacts(
        base_offset,
        result.outputs,
        result.live_before,
        result.source_ctime_ns,
        tuple(segment_name(p.base_offset, kind) for p in result.parts or () for kind, _ in p.outputs),
    )


def result_facts(base_offset: int, text: str) -> ResultFacts:
    """The facts of one stored result; a text not shaped as above goes to the strict decoder, which refuses it."""
    try:
        data: Any = orjson.loads(text)
        # by_suffix refuses a key that is no segment file's suffix (ValueError): the strict decoder then says so
        live = SegmentFiles.by_suffix(
            {
                sfx: FileStat(int(st["inode"]), int(st["size"]), int(st["mtime_ns"]))
                for sfx, st in data["live_before"].items()
            }
        )
        outputs = SegmentFiles.by_suffix({str(sfx): str(path) for sfx, path in data["outputs"].items()})
        parts = tuple(
            segment_name(int(p["base_offset"]), kind)
            for p in data.get("parts") or ()
            for kind, _ in SegmentFiles.by_suffix(p["outputs"])
        )
        return ResultFacts(base_offset, outputs, live, int(data.get("source_ctime_ns", 0)), parts)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        try:
            return strict(base_offset, text)
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise ModelError(f"the stored result of segment {base_offset} is not readable ({exc})") from exc
