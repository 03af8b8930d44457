"""The read-only endpoint: its fetch path on the Kafka-written fixtures (every offset of every partition, the cuts,
KIP-74's whole first entry, the torn tails it never serves), its answers as an independent decoder (kafka-python's)
reads them, and ``kafka-log-migrate serve`` as an operator runs it: real consumers (kafka-python, the Java client)
read a converted copy through it, it refuses to listen beyond loopback without the flag, it refuses a log dir a
broker holds, it refuses writes, and it leaves every file it served exactly as it was (ctimes included).
"""

from __future__ import annotations

import hashlib
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from client_envs import Unavailable, oracle_jars
from conftest import FIXTURES, LEGACY_LOGDIR, copy_logdir, have_java, run_cli
from kafka_layout import lock_held_by_other_process

from migrate.cli import main
from migrate.consumers.clients import ClientUnavailable, java_client, python_client
from migrate.consumers.expected import expected_from_reader
from migrate.consumers.judge import judge
from migrate.consumers.records import ClientKind, Outcome
from migrate.consumers.run import Partition, consume, records_of
from migrate.errors import MigrateError
from migrate.serve import fetch
from migrate.serve.handlers import OFFSET_OUT_OF_RANGE, Responder
from migrate.serve.header import response_frame
from migrate.serve.log import OffsetOutOfRange, open_log
from migrate.serve.server import Endpoint, is_loopback
from migrate.serve.wire import encode

_HEAD = struct.Struct(">qi")


def entries(path: Path) -> list[tuple[int, int, int]]:
    """(position, size, last offset) of every complete entry of a segment, walked here independently."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 17 <= len(data):
        offset, size = _HEAD.unpack_from(data, pos)
        if pos + 12 + size > len(data):
            break
        last = offset + (struct.unpack_from(">i", data, pos + 23)[0] if data[pos + 16] >= 2 else 0)
        out.append((pos, 12 + size, last))
        pos += 12 + size
    return out


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_logdir(LEGACY_LOGDIR, tmp_path_factory.mktemp("serve") / "logdir", FIXTURES / "mtimes.json")


def test_every_offset_is_served_from_the_entry_that_holds_it_with_the_files_own_bytes(legacy):
    log = open_log([legacy])
    assert len(log.partitions) == 20
    checked = 0
    for (topic, number), part in sorted(log.partitions.items()):
        layout = [(seg, entries(seg.path)) for seg in part.segments]
        for offset in range(part.log_start_offset, part.log_end_offset):
            # Kafka: the highest segment based at or below the offset, there the first entry whose last offset is at
            # or past it; else the first such entry of the segments after it
            floor = max((i for i, (seg, _) in enumerate(layout) if seg.base_offset <= offset), default=0)
            want = next(
                ((seg.path, e) for seg, ents in layout[floor:] for e in ents if e[2] >= offset),
                None,
            )
            got = part.read(offset, 1 << 20, min_one=True)
            assert want is not None, (topic, number, offset)
            path, (position, size, _) = want
            data = path.read_bytes()
            assert got[:size] == data[position : position + size], (topic, number, offset)
            assert data[position : position + len(got)] == got  # unchanged bytes, to the end of the segment at most
            checked += 1
    assert checked > 1000


def test_a_read_is_cut_at_its_limit_and_kip74_returns_the_whole_first_entry(legacy):
    part = open_log([legacy]).partitions[("gzip-v0", 0)]
    first = entries(part.segments[0].path)[0]
    assert first[1] > 100  # a gzip wrapper of several messages
    data = part.segments[0].path.read_bytes()
    assert part.read(0, 100, min_one=False) == data[:100]  # a partial entry: the client drops it, as with a broker
    assert part.read(0, 100, min_one=True) == data[: first[1]]  # KIP-74: the whole first entry, past the limit
    assert part.read(0, 0, min_one=False) == b""


def test_torn_tails_are_never_served_and_the_log_ends_at_the_last_complete_entry(legacy):
    log = open_log([legacy])
    for number in (0, 1):
        part = log.partitions[("truncated-tail", number)]
        last = part.segments[-1]
        complete = entries(last.path)
        assert last.path.stat().st_size > complete[-1][0] + complete[-1][1]  # there is a torn tail
        assert part.log_end_offset == complete[-1][2] + 1
        tail_start = complete[-1][0] + complete[-1][1]
        got = part.read(complete[-1][2], 1 << 20, min_one=True)
        assert got == last.path.read_bytes()[complete[-1][0] : tail_start]
        assert any("torn tail" in w for w in log.warnings if f"truncated-tail-{number}" in w)
        with pytest.raises(OffsetOutOfRange):
            part.read(part.log_end_offset + 1, 1000, min_one=True)
        assert part.read(part.log_end_offset, 1000, min_one=True) == b""


def test_timestamp_lookups_find_the_first_record_at_or_after_the_time(legacy):
    part = open_log([legacy]).partitions[("plain-v1", 1)]
    found = part.offset_for_timestamp(0)
    assert found is not None and found[0] == part.log_start_offset
    records = [r for s in part.segments for r in _records(s.path)]
    target = records[10][1]
    want = next(r for r in records if r[1] >= target)
    assert part.offset_for_timestamp(target) == want
    assert part.offset_for_timestamp(max(r[1] for r in records) + 1) is None
    best = max(r[1] for r in records)
    assert part.offset_of_max_timestamp() == next(r for r in records if r[1] == best)


def _records(path: Path) -> list[tuple[int, int]]:
    from migrate.segment.reader import read_file

    return [(r.offset, r.timestamp) for chunk in read_file(path) for r in chunk.entries.records()]


def test_a_fetch_gives_its_whole_first_entry_to_the_first_partition_only(legacy):
    """ReplicaManager.readFromLog: the response's max_bytes shared in request order; KIP-74 for the first data."""
    log = open_log([legacy])
    responder = Responder(log, "127.0.0.1", 1)
    topics = [
        fetch.FetchTopic("gzip-v0", partitions=[fetch.FetchPartition(0, fetch_offset=0, partition_max_bytes=10)]),
        fetch.FetchTopic("plain-v0", partitions=[fetch.FetchPartition(0, fetch_offset=0, partition_max_bytes=10)]),
        fetch.FetchTopic("plain-v0", partitions=[fetch.FetchPartition(1, fetch_offset=10**6, partition_max_bytes=10)]),
    ]
    request = fetch.FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=30, topics=topics)
    header = struct.pack(">hhih", 1, 11, 9, 1) + b"t"
    frame = responder.answer(header + encode(request, 11, False))
    assert frame is not None
    from kafka.protocol.consumer.fetch import FetchResponse

    answer = FetchResponse.decode(frame[8:], version=11)  # an independent decoder of the response
    first, second, third = (t.partitions[0] for t in answer.responses)
    gzip_first = entries(log.partitions[("gzip-v0", 0)].segments[0].path)[0][1]
    assert len(first.records) == gzip_first > 30  # whole, past both limits
    assert second.records == b""  # nothing of the response's 30 bytes was left
    assert third.error_code == OFFSET_OUT_OF_RANGE and third.high_watermark == -1
    assert first.high_watermark == first.last_stable_offset == 125 and first.log_start_offset == 0
    assert frame == response_frame(9, frame[8:], flexible_header=False)


def test_loopback_is_told_apart():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("127.3.2.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1")
    with pytest.raises(MigrateError, match="not a loopback address"):
        Endpoint([LEGACY_LOGDIR], "0.0.0.0")


def listing(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` and ``root`` itself: kind, size, inode, mtime, ctime, and each file's sha256 (a
    file opened for writing and put back would still have a new ctime)."""
    out = {}
    for p in [root, *sorted(root.rglob("*"))]:
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[str(p.relative_to(root))] = (p.is_dir(), st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, digest)
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixtures' log dir, converted by kafka-log-migrate's own plan and execute on a copy."""
    base = tmp_path_factory.mktemp("serve-converted")
    logdir = copy_logdir(LEGACY_LOGDIR, base / "logdir", FIXTURES / "mtimes.json")
    plan = base / "plan.json"
    assert main(["plan", "--log-dirs", str(logdir), "-o", str(plan), "--allow-unclean", "--truncate-tail"]) == 0
    assert main(["execute", "--plan", str(plan), "--engine", "serial"]) == 0
    return logdir


def test_serve_as_an_operator_runs_it_real_consumers_read_the_converted_copy_and_nothing_is_written(
    converted, tmp_path
):
    before = listing(converted)
    proc = subprocess.Popen(
        [sys.executable, "-m", "migrate.cli", "serve", "--log-dirs", str(converted)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving 20 partitions of ") and " read-only on 127.0.0.1:" in line, line
        bootstrap = line.split("bootstrap.servers=")[1].split()[0]
        log = open_log([converted])
        partitions = [Partition(t, p, s.log_end_offset) for (t, p), s in sorted(log.partitions.items())]
        expected = expected_from_reader([s.dir for s in log.partitions.values()])
        clients = [python_client(ClientKind.KAFKA_PYTHON)]
        if have_java():
            try:
                clients.append(java_client(oracle_jars()))
            except (Unavailable, ClientUnavailable) as exc:
                pytest.fail(f"the Java client cannot run here: {exc}")
        for client in clients:
            out = tmp_path / f"{client.kind}.jsonl"
            run = consume(client, bootstrap, partitions, out, idle_ms=5000)
            verdict = judge(run, records_of(out), expected, "legacy-logdir converted")
            assert verdict.outcome == Outcome.EQUAL and verdict.read == 1_236, verdict.summary
        from kafka import KafkaProducer
        from kafka.errors import TopicAuthorizationFailedError

        producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("plain-v0", b"a write").get(timeout=30)
        producer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "read-only" in err and "answered" in err
    assert listing(converted) == before


def test_serve_refuses_to_listen_beyond_loopback_without_the_flag(capsys):
    ran = run_cli(capsys, "serve", "--log-dirs", str(LEGACY_LOGDIR), "--host", "0.0.0.0")
    assert ran.code == 2
    assert "not a loopback address" in ran.err


def test_serve_refuses_a_log_dir_a_broker_holds(legacy, capsys):
    with lock_held_by_other_process(legacy):
        ran = run_cli(capsys, "serve", "--log-dirs", str(legacy))
        assert ran.code == 1
    assert ".lock is held" in ran.err
    os.unlink(legacy / ".lock")


def test_a_partition_in_two_served_log_dirs_is_refused(legacy, tmp_path):
    other = copy_logdir(LEGACY_LOGDIR, tmp_path / "other", FIXTURES / "mtimes.json")
    with pytest.raises(MigrateError, match="in two of the served log dirs"):
        open_log([legacy, other])
