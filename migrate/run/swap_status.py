"""What every reconciliation (status, and each verb before it acts) asks of 10^5-10^6 swapped segments, with a
Python object per file rather than a dozen: is every live file of a partition still the verified output its swap
record names (or every one still the original)?

``migrate.run.swap_record.partition_truth`` answers every case, and says what changed; this answers only the two
settled ones, comparing texts: the record must be, byte for byte, the record the swap writes from the state database's
rows (what ``_as_known`` proves), each of whose swap texts has the exact form ``swap_files_json`` writes (integers as
JSON writes them, so equal texts are equal numbers), and each live file's identity is written in that same form from
its stat and compared with the output's (or the original's) text. Anything else (a record that differs, a live file
that is missing, neither, or a partition part swapped) is answered None, and the caller asks ``partition_truth``,
which judges it and says what it sees: the checks are the same, only the settled case is cheaper.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence

from migrate import extensions
from migrate.run.swap_record import FileTruth, PartitionTruth, RecordData, record_file

_NUM = r"-?(?:0|[1-9][0-9]*)"
_STAT = r'\{"inode":' + _NUM + r',"size":' + _NUM + r',"mtime_ns":' + _NUM + r"\}"
# one swap file: suffix, original (its text, or null), output (its text), base offset of a split's later output
_FILE = (
    r'\{"suffix":"([A-Za-z0-9._-]*)","original":(null|'
    + _STAT
    + r'),"output":('
    + _STAT
    + r')(?:,"base_offset":('
    + _NUM
    + r"))?\}"
)
_FILE_RE = re.compile(_FILE)
_ANY_FILE = _FILE.replace("(", "(?:").replace("(?:?:", "(?:")  # the same, capturing nothing
_FILES_RE = re.compile(r"\[" + _ANY_FILE + r"(?:," + _ANY_FILE + r")*\]")
_THREE_FILES_RE = re.compile(r"\[" + _FILE + "," + _FILE + "," + _FILE + r"\]")
_EDGES_RE = re.compile(r"[0-9a-f]{64}")


def _files(swap: str) -> Sequence[tuple[str, str, str, str]] | None:
    """(suffix, original text or "null", output text, base offset text or "") of each file of a swap text of exactly
    the form ``swap_files_json`` writes; None for any other text."""
    m = _THREE_FILES_RE.fullmatch(swap)
    if m is not None:
        g = m.groups()
        return g[0:4], g[4:8], g[8:12]
    if _FILES_RE.fullmatch(swap) is None:
        return None
    return _FILE_RE.findall(swap)


def settled_truth(
    partition_dir: str, plan_id: str, partition: str, known: Sequence[tuple[int, str, str | None]]
) -> PartitionTruth | None:
    """CONVERTED where every live file of the partition is the verified output its swap record names, ORIGINAL where
    every one is the original, judged as ``partition_truth`` judges them; None for anything else, or where the
    record is not exactly the one the swap writes from the state database's rows ``known``
    (``StateStore.swap_pieces``: (base, swap JSON, the segment's record text up to its log edges) by base offset).
    The truth's record data hold each segment's swap text and log edges, no StatKeys and no result (what the
    verbs ask of a settled partition's record: its log edges, and only where the state is corrected its files)."""
    if not known:
        return None
    try:
        with open(record_file(partition_dir, plan_id), encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None  # no record, or one that cannot be read: partition_truth says which
    dumps = json.dumps
    head = f'{{"plan_id":{dumps(plan_id)},"partition":{dumps(partition)},"segments":['
    if not text.startswith(head) or not text.endswith("]}"):
        return None
    prefix = os.path.join(partition_dir, "")
    found = _scan(text, len(head), prefix, known if type(known) is list else list(known))
    if found is NotImplemented:  # a text that is not ASCII: the compiled scan leaves it to its twin
        found = _scan_reference(text, len(head), prefix, known)
    if found is None:
        return None
    converted, _, edges = found
    segments = tuple((base, None, swap, edge, None) for (base, swap, _), edge in zip(known, edges))
    truth = FileTruth.CONVERTED if converted else FileTruth.ORIGINAL
    return PartitionTruth(partition, truth, RecordData(plan_id, partition, segments, known=True))


def _scan_reference(
    text: str, pos: int, prefix: str, known: Sequence[tuple[int, str, str | None]]
) -> tuple[int, int, list[str]] | None:
    """From ``pos`` (just past the record's head), ``known``'s segments as ``settled_truth`` requires them, each live
    file stat'ed (``prefix``: the partition's dir and a separator): how many files are converted, how many original,
    and each segment's log edges; None where the record or a file says anything else. The Python twin of the
    compiled ``settled_scan`` (``migrate/run/_settled.c``), whose comment states the same judgement."""
    starts = text.startswith
    edges = _EDGES_RE.fullmatch
    stat = os.stat
    original = converted = 0
    found: list[str] = []
    for i, (base, swap, piece) in enumerate(known):
        # the record's segment is the database's texts spliced as ``record_text`` splices them (``_as_known``'s
        # proof), then 64 hex digits of log edges
        if piece is None or type(base) is not int or (i and not starts(",", pos)):
            return None
        pos += i > 0
        if not starts(piece, pos):
            return None
        # the result's text must be an object's, as in ``_as_known``: it is between the swap and the log edges
        at_result = pos + 34 + len(str(base)) + len(swap)
        pos += len(piece)
        if at_result >= pos - 15 or text[at_result] != "{" or text[pos - 15] != "}":
            return None
        if not edges(text, pos, pos + 64) or not starts('"}', pos + 64):
            return None
        found.append(text[pos : pos + 64])
        pos += 66
        files = _files(swap)
        if files is None:
            return None
        segment = f"{prefix}{base:020d}"
        for suffix, before, output, at in files:
            try:  # a split source's later outputs name their own segment
                st = stat(f"{prefix}{int(at):020d}{suffix}" if at else segment + suffix)
            except OSError:
                return None  # missing (or unreadable): partition_truth says what it is
            live = f'{{"inode":{st.st_ino},"size":{st.st_size},"mtime_ns":{st.st_mtime_ns}}}'
            if live == output:
                converted += 1
            elif live == before:
                original += 1
            else:
                return None
    if pos + 2 != len(text) or (original and converted):
        return None
    return converted, original, found


_settled, _ = extensions.load("migrate.run._settled")
_scan = _scan_reference if _settled is None else _settled.settled_scan
