"""Where a partition stands, from its directories alone: which directory is at its path, and where the other one is.

Each directory is known by its device and inode (``DirIdentity``), which no rename changes and no other directory
shares, so a stat of a few paths tells the whole story whatever a crash interrupted; the names the directories pass
through are in ``places``. Nothing here changes a file.
"""

from __future__ import annotations

from migrate.model.run_state import DirIdentity, Standing
from migrate.run.partition.places import PartitionPlaces, dir_at, holds
from migrate.run.partition.record import ExchangeRecord, UnreadableRecordError, read_record


def standing(places: PartitionPlaces, original: DirIdentity, new: DirIdentity) -> Standing:
    """Where the partition stands between its ``original`` and its ``new`` directory."""
    live = dir_at(places.live)
    if live is not None and original.names(live):
        if holds(places.fence_entry, new):
            return Standing.IN_FENCE
        return Standing.BUILT if any(holds(p, new) for p in places.built_places) else Standing.ORIGINAL
    if live is not None and new.names(live):
        if holds(places.kept, original):
            return Standing.CONVERTED
        if holds(places.fence_entry, original) or holds(places.fence_original, original):
            return Standing.EXCHANGED
        return Standing.FINALIZED
    if live is None and holds(places.fence_entry, new) and holds(places.fence_original, original):
        return Standing.OUT
    if live is None and not holds(places.fence_entry, new) and not holds(places.fence_original, original):
        return Standing.GONE
    return Standing.UNKNOWN


def find_record(places: PartitionPlaces) -> ExchangeRecord | None:
    """The partition's swap record where the new directory may be: at the live path, in the fence, or where it was
    built; None where no swap of this plan was ever recorded. UnreadableRecordError where one is found torn."""
    for directory in (places.live, places.fence_entry, *places.built_places):
        record = read_record(places.record_in(directory), places.plan_id)
        if record is not None:
            return record
    return None


def record_or_none(places: PartitionPlaces) -> tuple[ExchangeRecord | None, str]:
    """``find_record``, an unreadable record given as its message instead ('' when none was unreadable)."""
    try:
        return find_record(places), ""
    except UnreadableRecordError as exc:
        return None, str(exc)
