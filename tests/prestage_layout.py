"""Broker-shaped log dirs for the pre-stage tests, and what a running Kafka broker does to their files.

Segments come from the benchmark generator (``benchmarks/gen_legacy.py``), the files around them from the project's
one log-dir writer (``migrate.demo.legacy_logdir``). The broker's actions are the file operations its code performs
(online-prestage-facts.md §1): retention renames a segment's files to ``.deleted`` and unlinks them later; the cleaner
writes ``<first>.log.cleaned``, copies the last source's mtime onto it, renames it ``.swap``, renames the sources
``.deleted`` and the ``.swap`` to the final name; follower truncation truncates a closed segment in place and appends.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from conftest import REPO

from migrate.demo.legacy_logdir import PartitionFiles, write_broker_files
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import ConvertOptions
from migrate.prestage.location import default_staging_root
from migrate.prestage.record import Judgement, StagedSegment, judge_staged
from migrate.prestage.staged_index import INDEX_NAME, StagedIndex, decode_index
from migrate.prestage.tree import StagingTree

MTIME_NS = 1_600_000_000_000_000_000


def _load_gen():
    spec = importlib.util.spec_from_file_location("gen_legacy", REPO / "benchmarks" / "gen_legacy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_legacy", module)
    spec.loader.exec_module(module)
    return module


gen = _load_gen()


def add_segment(partition_dir: Path, base: int, records: int, *, magic: int = 0, seed: int = 1, value_bytes: int = 100):
    """``<base>.log`` of ``records`` legacy messages from offset ``base``, its mtime fixed (what retention reads)."""
    path = partition_dir / segment_name(base, ".log")
    gen.write_segment(path, records, first_offset=base, magic=magic, seed=seed, value_bytes=value_bytes)
    os.utime(path, ns=(MTIME_NS + base, MTIME_NS + base))
    return path


def broker_log_dir(
    root: Path, partitions: int = 2, segments: int = 3, records: int = 100, value_bytes: int = 100, topic: str = "t"
) -> Path:
    """``root/kafka``: ``partitions`` partitions of ``segments`` segments of ``records`` messages each (the last one
    active), v0 and v1 alternating by partition, with every file a broker keeps around them."""
    log_dir = root / "kafka"
    files = []
    for p in range(partitions):
        part = log_dir / f"{topic}-{p}"
        for s in range(segments):
            add_segment(part, s * records, records, magic=p % 2, seed=p + 1, value_bytes=value_bytes)
        files.append(PartitionFiles(topic, p, segments * records, leader_epochs=((3, 0),)))
    write_broker_files(log_dir, files)
    return log_dir


def snapshot(log_dir: Path) -> dict[str, tuple]:
    """Every file (name, inode, size, mtime, ctime) and directory (name, inode) under ``log_dir``."""
    out: dict[str, tuple] = {}
    for top, dirs, names in os.walk(log_dir):
        for name in dirs + names:
            path = Path(top) / name
            st = os.lstat(path)
            rel = str(path.relative_to(log_dir))
            if name in dirs:
                out[rel + "/"] = ("dir", st.st_ino)
            else:
                out[rel] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return out


def retention_delete(partition_dir: Path, base: int) -> None:
    """``LocalLog.deleteSegmentFiles``: rename each file to ``.deleted``, then (file.delete.delay.ms later) unlink."""
    for sfx in (".log", ".index", ".timeindex", ".txnindex"):
        path = partition_dir / segment_name(base, sfx)
        if path.exists():
            deleted = path.with_name(path.name + ".deleted")
            path.rename(deleted)
            deleted.unlink()


def cleaner_merge(partition_dir: Path, bases: list[int]) -> Path:
    """``Cleaner.cleanSegments`` + ``LocalLog.replaceSegments``: the group's records into ``<first>.log.cleaned``
    with the last source's mtime, renamed ``.swap``; the sources renamed ``.deleted``; the ``.swap`` renamed into
    place; the ``.deleted`` files unlinked later."""
    first = partition_dir / segment_name(bases[0], ".log")
    cleaned = first.with_name(first.name + ".cleaned")
    last_mtime = (partition_dir / segment_name(bases[-1], ".log")).stat().st_mtime_ns
    with cleaned.open("wb") as out:
        for base in bases:
            out.write((partition_dir / segment_name(base, ".log")).read_bytes())
        out.flush()
        os.fsync(out.fileno())
    os.utime(cleaned, ns=(last_mtime, last_mtime))
    swap = first.with_name(first.name + ".swap")
    cleaned.rename(swap)
    doomed = []
    for base in bases:
        old = partition_dir / segment_name(base, ".log")
        doomed.append(old.rename(old.with_name(old.name + ".deleted")))
    swap.rename(first)
    for path in doomed:
        path.unlink()
    return first


def staging_root(log_dir: Path, override: Path | None = None) -> Path:
    """The staging tree's root as the tool checks it (StagingPlaceError where refused); nothing is made."""
    tree = StagingTree.open(log_dir, override, create=False)
    if tree is None:
        return Path(os.path.realpath(override)) if override is not None else default_staging_root(log_dir)
    with tree:
        return tree.root


def judge(staged: StagedSegment, source: Path, options: ConvertOptions, **kwargs) -> Judgement:
    """``judge_staged`` of a record found by ``staged_segments``, its partition's staging dir opened for it."""
    tree = StagingTree.open(staged.record.log_dir, staged.root, create=False)
    assert tree is not None
    with tree:
        staging = tree.partition(staged.partition)
        assert staging is not None
        with staging:
            return judge_staged(staged, source, options, staging, **kwargs)


def read_index_at(staging_dir: Path) -> StagedIndex:
    """The staged index of one partition's staging dir, decoded (the test reads it by path: no hostile tree here)."""
    path = staging_dir / INDEX_NAME
    return decode_index(path.read_bytes(), str(path))


def io_priority() -> tuple[int, int] | None:
    """(class, level) of this process's I/O priority by Linux's ``ioprio_get``, or None where it cannot be read."""
    import ctypes
    import platform

    from migrate.prestage.priority import _IOPRIO_CLASS_SHIFT, _IOPRIO_WHO_PROCESS, _SYSCALLS

    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        return None
    value = ctypes.CDLL(None, use_errno=True).syscall(numbers[1], _IOPRIO_WHO_PROCESS, 0)
    return None if value < 0 else (value >> _IOPRIO_CLASS_SHIFT, value & ((1 << _IOPRIO_CLASS_SHIFT) - 1))
