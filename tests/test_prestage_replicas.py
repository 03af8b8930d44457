"""Replicas compared on their staged outputs before any broker is cut over (``migrate.prestage.replicas``): two
brokers' copies of one log dir pre-staged, then one copy diverged, one re-timed, one left unstaged; and the whole
flow on a real Dask cluster of three brokers (``prestage --scheduler``)."""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import pytest
from cluster_harness import BrokerCluster, can_unshare, make_tls
from conftest import needs_root_power, run_cli
from kafka_layout import make_broker_logdir
from prestage_layout import broker_log_dir, snapshot

from migrate.format.entries import walk_entries
from migrate.kafka.names import segment_name
from migrate.prestage.controls import Controls
from migrate.prestage.passes import PrestageRequest, run_prestage
from migrate.prestage.replicas import DifferenceKind, StagedDifference, compare_staged, staged_digests


def diverge(segment: Path, offset: int) -> None:
    """Change the last value byte of the v0 message at ``offset`` and fix its CRC-32: every reader accepts it."""
    data = bytearray(segment.read_bytes())
    st = segment.stat()
    walk = walk_entries(bytes(data))
    for p, size in zip(walk.positions.tolist(), walk.sizes.tolist()):
        if struct.unpack_from(">q", data, p)[0] == offset:
            data[p + size - 1] ^= 0x01
            struct.pack_into(">I", data, p + 12, zlib.crc32(bytes(data[p + 16 : p + size])) & 0xFFFFFFFF)
            segment.write_bytes(bytes(data))
            shutil.copystat(segment, segment)  # same size; mtime kept below so only the records differ
            import os

            os.utime(segment, ns=(st.st_atime_ns, st.st_mtime_ns))
            return
    raise AssertionError(f"no offset {offset} in {segment}")


def prestaged(log_dir: Path) -> list:
    assert run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), Controls()).ok
    return staged_digests(log_dir)


def test_identical_replicas_agree_and_each_kind_of_difference_is_named(tmp_path):
    one = broker_log_dir(tmp_path / "b1", partitions=2, segments=3)
    two = tmp_path / "b2" / "kafka"
    shutil.copytree(one, two)  # copy2: the same bytes and mtimes, as two in-sync replicas
    same = compare_staged({1: prestaged(one), 2: prestaged(two)})
    assert (same.compared, same.uncompared, same.differences) == (8, 0, ())

    three = tmp_path / "b3" / "kafka"
    shutil.copytree(one, three)
    diverge(three / "t-0" / segment_name(100, ".log"), 150)  # a replica whose record at offset 150 differs
    later = (three / "t-0" / segment_name(0, ".log")).stat().st_mtime_ns + 10**12
    os_utime(three / "t-0" / segment_name(0, ".log"), later)  # the same records, written 1,000 s later
    digests = prestaged(three)
    digests = [d for d in digests if (d.partition, d.base_offset) != ("t-1", 100)]  # boundaries the peer lacks
    check = compare_staged({1: prestaged(one), 3: digests})
    assert check.compared == 6 and check.uncompared == 1
    assert check.differences == (
        StagedDifference("t-0", 0, 0, 99, DifferenceKind.TIMESTAMPS, ((1,), (3,))),
        StagedDifference("t-0", 100, 100, 199, DifferenceKind.RECORDS, ((1,), (3,))),
    )
    assert [d.partition for d in check.diverged] == ["t-0"]
    # two brokers agree against the third: the groups say who agrees with whom
    trio = compare_staged({1: prestaged(one), 2: prestaged(two), 3: prestaged(three)})
    (records,) = trio.diverged
    assert records.groups == ((1, 2), (3,))


def os_utime(path: Path, mtime_ns: int) -> None:
    import os

    os.utime(path, ns=(mtime_ns, mtime_ns))


# replicas of plain-v0-0 on 1 and 2, of plain-v0-1 on 1 and 3 (broker 3's copy diverges at offset 7)
HOLDINGS = {1: ["plain-v0-0", "plain-v0-1"], 2: ["plain-v0-0"], 3: ["plain-v0-1"]}


@pytest.mark.slow
def test_prestage_over_a_cluster_compares_the_replicas_before_any_cut_over(tmp_path, capsys):
    if not can_unshare():
        needs_root_power("brokers at one path need mount namespaces (unshare -m)")
    tls = make_tls(tmp_path / "tls")
    brokers = {
        b: make_broker_logdir(tmp_path / f"b{b}", partitions=parts, broker_id=b) for b, parts in HOLDINGS.items()
    }
    diverge(brokers[3] / "plain-v0-1" / segment_name(0, ".log"), 7)
    before = {b: snapshot(d) for b, d in brokers.items()}
    # each broker's host: its log dir and, beside it, the staging tree on its own disk, all at one path
    hosts = {b: d.parent for b, d in brokers.items()}
    data = tmp_path / "host"
    with BrokerCluster(tls, hosts, data) as cluster:
        secure = ["--scheduler", cluster.address, "--tls-dir", str(tls)]
        log_dir = str(data / "kafka-logs")
        ran = run_cli(capsys, "prestage", "--log-dirs", log_dir, "--brokers", "1,2,3", "--rate", "0", *secure)
        code = ran.code
        out = ran.out
    assert code == 1, out
    for b in (1, 2, 3):
        assert f"broker {b} (" in out and "done after 1 pass(es)" in out
    assert "replicas on the staged outputs: 6 staged segments compared" in out
    assert "DIVERGED: plain-v0-1 segment 0 (offsets 0..29): brokers 1 vs 3 hold different records" in out
    assert "plain-v0-0" not in out.split("replicas on the staged outputs")[1]  # its replicas agree
    # nothing under any broker's log dir changed; each broker's staging lies beside its own data
    assert {b: snapshot(d) for b, d in brokers.items()} == before
    for b, d in brokers.items():
        assert {x.partition for x in staged_digests(d)} == set(HOLDINGS[b])
