"""Prove a converted segment against its original: the proof a pre-staged segment needs before its original goes.

A segment converted in the run is verified against digests the same process computed while it read the source, so
its verification ties the output to the source. A segment taken from pre-staging was not read at the cut-over: its
digests come from the pre-stage record, which lies in a staging tree anyone with write access beside the log dir may
have edited (a forged segment with a record made to match verifies against itself). So before its original is
deleted, the original is read again and converted without writing anything (``stream_entries`` into a sink that
keeps nothing), which gives the digests the conversion must have: of the original's records, and of the records with the
timestamps the options give them (the original's own mtime for v0 under ``--timestamps mtime``). The live output
must read back as exactly those (``verify_segment``: every CRC, both digests, both indexes), and the recorded
digests must be those too.
"""

from __future__ import annotations

import dataclasses
import os

from migrate.errors import LocatedError
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import SegmentResult, SegmentTask
from migrate.segment.convert import stream_entries
from migrate.segment.verify import verify_segment


@dataclasses.dataclass(frozen=True)
class Proof:
    """The outcome of proving one output: empty ``problems`` means proven."""

    original: str
    output: str
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


class _Discarded:
    """Where the converted batches go when only their digests are wanted."""

    def write(self, data: bytes | memoryview) -> int:
        return len(data)


def original_digests(original: str, base_offset: int, options: ConvertOptions) -> tuple[str, str]:
    """(the digest of the original's records, the digest the converted records must read back as), from the
    original's own bytes and mtime, with nothing written."""
    fd = os.open(original, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        task = SegmentTask(source=original, staging_dir="", base_offset=base_offset, options=options)
        with open(fd, "rb", buffering=0, closefd=False) as src:
            result = stream_entries(task, src, _Discarded(), st).result
    finally:
        os.close(fd)
    return result.source_digest, result.output_digest_ts


def prove_output(original: str, result: SegmentResult, options: ConvertOptions) -> Proof:
    """``result`` (its ``outputs`` naming the live files) proven to be ``original`` converted with ``options``."""
    output = result.outputs.log or ""
    try:
        source_digest, output_digest = original_digests(original, result.base_offset, options)
    except (OSError, LocatedError) as exc:
        return Proof(original, output, (f"the original {original} cannot be read again: {exc}",))
    problems = []
    if result.digest != options.digest:
        problems.append(f"{output}: recorded with digest {result.digest}, the plan uses {options.digest}")
    if result.source_digest != source_digest:
        problems.append(
            f"{output}: its recorded source digest {result.source_digest[:16]}... is not that of the original "
            f"{original} ({source_digest[:16]}...): the record it was taken with does not describe this original"
        )
    if result.output_digest_ts != output_digest:
        problems.append(
            f"{output}: its recorded output digest {result.output_digest_ts[:16]}... is not what the original "
            f"converts to ({output_digest[:16]}...)"
        )
    expected = dataclasses.replace(result, source_digest=source_digest, output_digest_ts=output_digest)
    try:
        check = verify_segment(expected, options)
    except (OSError, LocatedError) as exc:
        return Proof(original, output, (*problems, f"{output} cannot be read back: {exc}"))
    problems += [f"{output}: {p}" for p in check.problems]
    return Proof(original, output, tuple(problems))
