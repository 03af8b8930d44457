"""How a partition changes directory: build the new one, take it in, put the original back, delete the original.

Every move starts from wherever the partition stands (``standing``), so the verb that runs after a crash finishes
or undoes exactly what was left: ``move_in`` goes forward to CONVERTED, ``move_out`` back to ORIGINAL, whatever the
point the crash stopped at, and never does a step twice. Forward with ``ExchangeMethod.EXCHANGE``:

    BUILT      rename the new directory into the fence          (<fence>/<partition>)
    IN_FENCE   exchange it with the live path                  (renameat2 RENAME_EXCHANGE: the one atomic step)
    EXCHANGED  rename the original into the new one's work dir  (<live>/.kafka-log-migrate-<plan>/original)

and with ``ExchangeMethod.RENAMES`` (no exchange on this filesystem) IN_FENCE renames the original out into the fence
(OUT: nothing at the live path, the fence up) and then the new one in. Each step is one rename of one directory; the
caller makes a batch of them durable with one syncfs. The fence must be up before the first and stays up until the
last is durable (``Standing.mixed``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from collections.abc import Callable, Collection
from dataclasses import dataclass

from migrate.errors import MigrateError
from migrate.model.run_state import DirIdentity, ExchangeMethod, Standing
from migrate.run import faults
from migrate.run.exchange import ExchangeUnsupported, exchange
from migrate.run.partition.places import KEPT_DIR, NEW_DIR, RECORD_FILE, PartitionPlaces, dir_at, holds
from migrate.run.partition.record import LinkedFile
from migrate.run.partition.standing import standing

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# what a conversion leaves in its output dir while it works (ranges, joins): removed before the directory goes live
_TEMPORARY_RE = re.compile(r"^\d{20}\.(?:log|index|timeindex)\.[a-z]+.*$|^\.[^/]*\.partial$", re.ASCII)


class BuildRefusedError(MigrateError):
    """The partition cannot be swapped whole as it is (a directory or a link inside it, a file in the new directory
    that no conversion wrote): it fails alone, untouched."""


@dataclass(frozen=True)
class Place:
    """A directory by the directory it is in (open as ``parent``) and its name there; ``path`` for messages.
    ``owned``: ``parent`` was opened for this place, and ``close`` closes it (else it is the caller's, a staging
    tree's)."""

    parent: int
    name: str
    path: str
    owned: bool = False

    def close(self) -> None:
        if self.owned:
            os.close(self.parent)


@dataclass(frozen=True)
class Built:
    original: DirIdentity
    new: DirIdentity
    linked: tuple[LinkedFile, ...]


def open_dir(path: str) -> int:
    return os.open(path, _DIR_FLAGS)


def cold_place(places: PartitionPlaces, create: bool) -> Place | None:
    """Where a cold run builds the new directory (in the original's work dir), opened; made with ``create``."""
    try:
        work = open_dir(places.work)
    except FileNotFoundError:
        if not create:
            return None
        os.mkdir(places.work)
        work = open_dir(places.work)
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(NEW_DIR, dir_fd=work)
    return Place(work, NEW_DIR, os.path.join(places.work, NEW_DIR), owned=True)


def built_place(places: PartitionPlaces, new: DirIdentity, staging_root: int | None) -> Place | None:
    """Where the new directory ``new`` is built, opened: the cut-over's staging dir (its tree's root open as
    ``staging_root``) or the cold place in the original's work dir; None where it is at neither (moved on, or
    gone)."""
    if places.staging is not None and staging_root is not None:
        try:
            st = os.stat(places.name, dir_fd=staging_root, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and new.names(st):
            return Place(staging_root, places.name, places.staging)
    cold = cold_place(places, create=False)
    if cold is not None and not holds(cold.path, new):
        cold.close()
        return None
    return cold


def build(
    places: PartitionPlaces,
    place: Place,
    outputs: Collection[str],
    ours: Callable[[str], bool] = lambda name: False,
) -> Built:
    """Make the new directory at ``place`` complete: every regular file of the live directory that no output
    replaces, hard-linked under its own name (the same inode: the same bytes and mtime, no copy); the live
    directory's owner and mode. ``outputs``: the names the new directory must hold already (converted segments and
    their indexes); ``ours``: other names of this tool it may hold (a cut-over's pre-stage records). Temporary files
    of a conversion are removed; anything else refuses the partition (BuildRefusedError). Idempotent: a build a crash
    interrupted is finished."""
    live = open_dir(places.live)
    try:
        new = os.open(place.name, _DIR_FLAGS, dir_fd=place.parent)
        try:
            return _build(places, live, new, place.path, set(outputs), ours)
        finally:
            os.close(new)
    finally:
        os.close(live)


def _build(
    places: PartitionPlaces, live: int, new: int, new_path: str, outputs: set[str], ours: Callable[[str], bool]
) -> Built:
    work_name = places.work_name
    present = {}
    for entry in os.scandir(new):
        if entry.name == work_name:
            continue
        if not entry.is_file(follow_symlinks=False):
            raise BuildRefusedError(f"{new_path}/{entry.name}: not a regular file; the new directory holds only files")
        present[entry.name] = entry.stat(follow_symlinks=False)
    missing = sorted(outputs - present.keys())
    if missing:
        raise BuildRefusedError(f"{new_path}: the converted {missing[0]} is not there (and {len(missing) - 1} more)")
    linked = []
    live_names = set()
    for entry in os.scandir(live):
        name = entry.name
        live_names.add(name)
        if name == work_name:
            continue
        if not entry.is_file(follow_symlinks=False):
            what = "directory" if entry.is_dir(follow_symlinks=False) else "link or special file"
            raise BuildRefusedError(
                f"{places.live}/{name} is a {what}: the swap moves a partition's directory whole and carries only its "
                "regular files. Move it out of the partition dir (Kafka never reads it), then run `execute` again."
            )
        if name in outputs:
            continue
        st = entry.stat(follow_symlinks=False)
        there = present.get(name)
        if there is None:
            faults.point("before:link")
            os.link(name, name, src_dir_fd=live, dst_dir_fd=new, follow_symlinks=False)
        elif (there.st_dev, there.st_ino) != (st.st_dev, st.st_ino):
            raise BuildRefusedError(
                f"{new_path}/{name} is not the live {places.live}/{name}: another file of that name"
            )
        linked.append(LinkedFile(name, st.st_ino, st.st_size, st.st_mtime_ns))
    for name in present.keys() - outputs - live_names:
        if _TEMPORARY_RE.match(name):
            os.unlink(name, dir_fd=new)
        elif not ours(name):
            raise BuildRefusedError(
                f"{new_path}/{name}: a file no conversion of this run wrote; nothing was swapped. Check what it is, "
                "move it away, then run `execute` again."
            )
    st = os.fstat(live)
    mine = os.fstat(new)
    if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
        os.fchown(new, st.st_uid, st.st_gid)
    if stat.S_IMODE(mine.st_mode) != stat.S_IMODE(st.st_mode):
        os.fchmod(new, stat.S_IMODE(st.st_mode))
    with contextlib.suppress(FileExistsError):
        os.mkdir(work_name, dir_fd=new)
    return Built(DirIdentity.of(st), DirIdentity.of(os.fstat(new)), tuple(linked))


def move_in(
    places: PartitionPlaces, original: DirIdentity, new: DirIdentity, method: ExchangeMethod, place: Place | None
) -> None:
    """Take the partition from wherever it stands to CONVERTED (``place``: where the new directory was built, which
    the first step needs). MigrateError where it stands where no step leads (something else at its path: it is left
    as it is, the fence up)."""
    log_dir, fence = open_dir(places.log_dir), open_dir(places.fence)
    try:
        where = standing(places, original, new)
        if where == Standing.BUILT:
            if place is None:
                raise MigrateError(f"{places.built}: the new directory is there but was not opened to move (a bug)")
            faults.point("before:new-into-fence")
            os.rename(place.name, places.name, src_dir_fd=place.parent, dst_dir_fd=fence)
            faults.point("after:new-into-fence")
            where = _expect(places, original, new, Standing.IN_FENCE)
        if where == Standing.IN_FENCE:
            if method == ExchangeMethod.EXCHANGE:
                faults.point("before:exchange")
                exchange(fence, places.name, log_dir, places.name)
                faults.point("after:exchange")
                where = _expect(places, original, new, Standing.EXCHANGED)
            else:
                faults.point("before:original-out")
                os.rename(places.name, places.name + ".original", src_dir_fd=log_dir, dst_dir_fd=fence)
                faults.point("after:original-out")
                where = _expect(places, original, new, Standing.OUT)
        if where == Standing.OUT:
            faults.point("before:new-in")
            os.rename(places.name, places.name, src_dir_fd=fence, dst_dir_fd=log_dir)
            faults.point("after:new-in")
            where = _expect(places, original, new, Standing.EXCHANGED)
        if where == Standing.EXCHANGED:
            out = places.name if method == ExchangeMethod.EXCHANGE else places.name + ".original"
            work = open_dir(places.work)
            try:
                faults.point("before:keep-original")
                os.rename(out, KEPT_DIR, src_dir_fd=fence, dst_dir_fd=work)
                faults.point("after:keep-original")
            finally:
                os.close(work)
            where = _expect(places, original, new, Standing.CONVERTED)
        if where != Standing.CONVERTED:
            raise MigrateError(f"{places.live}: stands {where}; its swap cannot go on from there (a bug: report it)")
    finally:
        os.close(log_dir)
        os.close(fence)


def move_out(
    places: PartitionPlaces, original: DirIdentity, new: DirIdentity, method: ExchangeMethod, place: Place | None
) -> None:
    """Take the partition from wherever it stands back to ORIGINAL, the new directory deleted (its hard links are
    only names: the original's files keep theirs). ``place``: where the new directory was built (None: gone)."""
    where = standing(places, original, new)
    if where in (Standing.CONVERTED, Standing.EXCHANGED, Standing.OUT, Standing.IN_FENCE):
        log_dir, fence = open_dir(places.log_dir), open_dir(places.fence)
        try:
            out = places.name if method == ExchangeMethod.EXCHANGE else places.name + ".original"
            if where == Standing.CONVERTED:
                work = open_dir(places.work)
                try:
                    faults.point("before:original-to-fence")
                    os.rename(KEPT_DIR, out, src_dir_fd=work, dst_dir_fd=fence)
                    faults.point("after:original-to-fence")
                finally:
                    os.close(work)
                where = _expect(places, original, new, Standing.EXCHANGED)
            if where == Standing.EXCHANGED:
                if method == ExchangeMethod.EXCHANGE:
                    faults.point("before:exchange-back")
                    exchange(fence, places.name, log_dir, places.name)
                    faults.point("after:exchange-back")
                    where = _expect(places, original, new, Standing.IN_FENCE)
                else:
                    faults.point("before:new-out")
                    os.rename(places.name, places.name, src_dir_fd=log_dir, dst_dir_fd=fence)
                    faults.point("after:new-out")
                    where = _expect(places, original, new, Standing.OUT)
            if where == Standing.OUT:
                faults.point("before:original-in")
                os.rename(places.name + ".original", places.name, src_dir_fd=fence, dst_dir_fd=log_dir)
                faults.point("after:original-in")
                where = _expect(places, original, new, Standing.IN_FENCE)
            if where == Standing.IN_FENCE:
                faults.point("before:remove-new")
                shutil.rmtree(places.name, dir_fd=fence)
                faults.point("after:remove-new")
                where = _expect(places, original, new, Standing.ORIGINAL)
        finally:
            os.close(log_dir)
            os.close(fence)
    if where == Standing.BUILT and place is not None:
        faults.point("before:remove-new")
        shutil.rmtree(place.name, dir_fd=place.parent)
        faults.point("after:remove-new")
        where = Standing.ORIGINAL
    if where != Standing.ORIGINAL:
        raise MigrateError(f"{places.live}: stands {where}; its original cannot be put back from there")


def write_record_in(place: Place, work_name: str, text: str) -> None:
    """The swap record into the new directory's work dir, reached through descriptors (a cut-over's new directory
    is in the untrusted staging tree: no link there is followed), whole or not at all; durable with the caller's
    next syncfs."""
    new = os.open(place.name, _DIR_FLAGS, dir_fd=place.parent)
    try:
        work = os.open(work_name, _DIR_FLAGS, dir_fd=new)
        try:
            partial = f".{RECORD_FILE}.partial"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial, dir_fd=work)
            fd = os.open(
                partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=work
            )
            try:
                view = memoryview(text.encode())
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.rename(partial, RECORD_FILE, src_dir_fd=work, dst_dir_fd=work)
        finally:
            os.close(work)
    finally:
        os.close(new)


def remove_work(places: PartitionPlaces, mtime_ns: int | None) -> None:
    """The original's work dir removed (what the conversions wrote there), and the original's mtime put back. Never
    the work dir of a converted directory, which keeps the original (MigrateError)."""
    if dir_at(places.kept) is not None:
        raise MigrateError(f"{places.kept}: the original is kept there; its work dir is not removed (a bug)")
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(places.work)
    if mtime_ns is not None:
        st = os.stat(places.live)
        os.utime(places.live, ns=(st.st_atime_ns, mtime_ns))


def drop_original(places: PartitionPlaces, original: DirIdentity) -> bool:
    """Finalize: the kept original deleted (its files the new directory holds too keep those names), then the new
    directory's work dir (the record): nothing of this tool is left in the partition. True if the original was
    there."""
    kept = dir_at(places.kept)
    there = kept is not None and original.names(kept)
    if there:
        faults.point("before:drop-original")
        shutil.rmtree(places.kept)
        faults.point("after:drop-original")
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(places.work)
    return there


def _expect(places: PartitionPlaces, original: DirIdentity, new: DirIdentity, want: Standing) -> Standing:
    """The standing after a step, which must be ``want``: anything else means another process moved a directory
    under this one (the fence and Kafka's lock keep brokers out; this is a second tool or a person)."""
    now = standing(places, original, new)
    if now != want:
        raise MigrateError(
            f"{places.live}: after a step of its swap it stands {now}, not {want}: another process moved one of its "
            "directories. Nothing more was done; the fence stays up. Find who (lsof, the shell history), then run the "
            "same command again."
        )
    return now


def supports_exchange(probe_dir: str) -> bool:
    """Whether the filesystem of ``probe_dir`` (a directory of ours, such as the fence) exchanges two names: two
    empty directories made, exchanged and removed there."""
    a, b = os.path.join(probe_dir, ".exchange-probe-a"), os.path.join(probe_dir, ".exchange-probe-b")
    for path in (a, b):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
    fd = open_dir(probe_dir)
    try:
        exchange(fd, ".exchange-probe-a", fd, ".exchange-probe-b")
        return True
    except ExchangeUnsupported:
        return False
    except OSError as exc:
        if exc.errno == errno.EPERM:
            return False
        raise
    finally:
        os.close(fd)
        for path in (a, b):
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(path)
