"""A small segment converted whole in one call of the accelerator (``migrate.segment.small``) gives exactly what the
general path gives: the same .log, .index and .timeindex bytes and the same result, or it steps aside (None) and the
general path converts it or refuses it with its precise error. Checked on every fixture segment, on generated
segments under every option the whole path takes, and on thousands of damaged ones (CRCs recomputed for half, so
the damage gets past the checksums); the compiled function is also fed raw garbage directly. Likewise the verifier's
whole read-back of a small converted .log (``small_v2_records``): the same check as its general read, on sound and on
damaged outputs."""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import struct
from pathlib import Path

import pytest
from conftest import FIXTURES, LEGACY_LOGDIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_format_fuzz import fuzz

from migrate.errors import LocatedError
from migrate.format import accel, legacy
from migrate.kafka.names import FileKind
from migrate.model.plan_tree import ConvertOptions, TimestampPolicy
from migrate.model.run_state import SegmentTask
from migrate.segment import convert, small, verify
from migrate.segment.verify import verify_segment

pytestmark = pytest.mark.skipif(accel.speedups is None, reason="the whole path needs the C accelerator")

MTIME_NS = 1_500_000_000_123_456_789
FIXTURE_SEGMENTS = sorted(p for p in (FIXTURES / "legacy-logdir").glob("*/*.log"))


class Spy:
    """``small._small_legacy_v2`` counting the segments it converted (a result, not None)."""

    def __init__(self) -> None:
        self.real = small._small_legacy_v2
        self.converted = 0

    def __call__(self, *args):
        out = self.real(*args)
        self.converted += out is not None
        return out


def _convert(source: Path, staging: Path, options: ConvertOptions, base: int):
    """convert_segment's outcome: (result, the three files' bytes, whether they verify), or the refusal's type and
    message."""
    try:
        result = convert.convert_segment(SegmentTask(str(source), str(staging), base, options))
    except LocatedError as exc:
        return type(exc).__name__, str(exc)
    files = {sfx: Path(path).read_bytes() for sfx, path in result.outputs.items()}
    return result, files, verify_segment(result, options).ok if result.outputs else None


def _comparable(outcome):
    if isinstance(outcome[0], str):
        return outcome
    result, files, verified = outcome
    fields = dataclasses.asdict(result)
    fields.pop("seconds")
    fields["outputs"] = result.outputs.kinds()  # the paths differ by staging dir
    fields["output_stats"] = {k: (v.size, v.mtime_ns) for k, v in result.output_stats}
    return fields, files, verified


def _both(tmp_path: Path, source: Path, options: ConvertOptions, base: int, monkeypatch, spy: Spy):
    """The whole path's outcome and the general path's, each into its own staging dir."""
    monkeypatch.setattr(small, "_small_legacy_v2", spy)
    whole = _convert(source, tmp_path / "whole", options, base)
    monkeypatch.setattr(small, "_small_legacy_v2", None)
    general = _convert(source, tmp_path / "general", options, base)
    monkeypatch.setattr(small, "_small_legacy_v2", spy.real)
    for d in ("whole", "general"):
        shutil.rmtree(tmp_path / d, ignore_errors=True)
    return whole, general


def _source(tmp_path: Path, data: bytes, base: int = 0) -> Path:
    live = tmp_path / "live"
    live.mkdir(parents=True, exist_ok=True)
    path = live / f"{base:020d}.log"
    path.write_bytes(data)
    os.utime(path, ns=(MTIME_NS, MTIME_NS))
    return path


@pytest.mark.parametrize(
    "options", [ConvertOptions(), ConvertOptions(timestamps=TimestampPolicy.NONE)], ids=["mtime", "none"]
)
def test_every_fixture_segment_converts_as_the_general_path_converts_it(tmp_path, monkeypatch, options):
    spy = Spy()
    compared = 0
    for path in FIXTURE_SEGMENTS:
        base = int(path.stem)
        source = _source(tmp_path / path.parent.name, path.read_bytes(), base)
        whole, general = _both(tmp_path, source, options, base, monkeypatch, spy)
        assert _comparable(whole) == _comparable(general), path
        compared += 1
        if not isinstance(whole[0], str):
            assert whole[2] is not False, path  # verified from disk (None: nothing written, the source unchanged)
    assert compared == len(FIXTURE_SEGMENTS) >= 40
    # the fixtures' plain legacy segments (v0 and v1, keys and values null, empty and not): the whole path took them
    assert spy.converted >= 10, spy.converted


def _message(offset: int, magic: int, log_append: bool, timestamp: int, key: bytes | None, value: bytes | None):
    attributes = legacy.TIMESTAMP_TYPE_BIT if magic == 1 and log_append else 0
    return legacy.encode_message(offset, magic, attributes, timestamp if magic == 1 else -1, key, value)


_payload = st.one_of(st.none(), st.binary(max_size=40))
_messages = st.lists(
    st.tuples(
        st.integers(1, 3),  # offset step
        st.sampled_from([0, 1]),
        st.booleans(),
        st.integers(-1, 2**41),
        _payload,
        _payload,
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    messages=_messages,
    base=st.sampled_from([0, 7, 2**31 + 5]),
    first_gap=st.integers(0, 2),
    policy=st.sampled_from(list(TimestampPolicy)),
    epoch=st.integers(-1, 2**31 - 1),
    tombstone=st.booleans(),
    interval=st.sampled_from([1, 64, 100, 4096]),
    max_message=st.sampled_from([60, 1_000_000]),
)
def test_generated_segments_convert_as_the_general_path_converts_them(
    tmp_path, monkeypatch, messages, base, first_gap, policy, epoch, tombstone, interval, max_message
):
    offset = base + first_gap
    parts = []
    for step, magic, log_append, timestamp, key, value in messages:
        parts.append(_message(offset, magic, log_append, timestamp, key, value))
        offset += step
    options = ConvertOptions(
        timestamps=policy,
        partition_leader_epoch=epoch,
        tombstone_flag=tombstone,
        index_interval_bytes=interval,
        max_message_bytes=max_message,
    )
    source = _source(tmp_path, b"".join(parts), base)
    spy = Spy()
    whole, general = _both(tmp_path, source, options, base, monkeypatch, spy)
    assert _comparable(whole) == _comparable(general)
    if max_message > 100_000:
        assert spy.converted == 1  # sound plain messages within every limit: the whole path took it


@pytest.mark.parametrize("interval", [1, 4096])
@pytest.mark.parametrize("stamps", [[0], [-1], [-1, 0], [5, 6], [6, 5], [0, 0, 1], [2**62, 2**62 + 1]], ids=str)
def test_timestamps_one_apart_index_as_the_general_path_indexes_them(tmp_path, monkeypatch, stamps, interval):
    """The time index's entries and its roll entry turn on a max that grew, by one or more: v1 CreateTime."""
    data = b"".join(_message(i, 1, False, ts, b"k", b"v") for i, ts in enumerate(stamps))
    spy = Spy()
    options = ConvertOptions(index_interval_bytes=interval)
    whole, general = _both(tmp_path, _source(tmp_path, data), options, 0, monkeypatch, spy)
    assert _comparable(whole) == _comparable(general) and spy.converted == 1


def test_offsets_out_of_order_or_below_the_base_step_aside(tmp_path, monkeypatch):
    cases = {
        "repeated": _message(5, 0, False, -1, b"k", b"v") + _message(5, 0, False, -1, b"k", b"w"),
        "below the base": _message(3, 1, False, 10, None, b"v"),
        "past 2^31 - 1 above the base": _message(4 + 2**31, 0, False, -1, b"k", None),
    }
    for name, data in cases.items():
        spy = Spy()
        source = _source(tmp_path / name.replace(" ", "-"), data, 4)
        whole, general = _both(tmp_path, source, ConvertOptions(), 4, monkeypatch, spy)
        assert isinstance(whole[0], str) and whole == general, name  # the general path's precise refusal
        assert spy.converted == 0


def test_damaged_segments_convert_or_are_refused_as_the_general_path_does(tmp_path, monkeypatch):
    segments = [s for s in fuzz.load_segments([LEGACY_LOGDIR]) if len(s.data) < 64 * 1024]
    rng = random.Random(20261126)
    spy = Spy()
    kinds: dict[str, int] = {}
    for i in range(600):
        seg = segments[i % len(segments)]
        kind, data = fuzz.mutate(rng, seg)
        source = _source(tmp_path / f"case{i}", data, 0)
        whole, general = _both(tmp_path, source, ConvertOptions(), 0, monkeypatch, spy)
        assert _comparable(whole) == _comparable(general), (seg.name, kind)
        outcome = "refused" if isinstance(whole[0], str) else "converted"
        kinds[outcome] = kinds.get(outcome, 0) + 1
    # the damage is real and some of it reached the whole path past the checksums
    assert kinds.get("refused", 0) >= 100 and spy.converted >= 20, (kinds, spy.converted)


def _hostile(sound: bytes, rng: random.Random, sizes: list[int], garbage_bytes: int) -> list[bytes]:
    """Empty and zeroed buffers, ``sound`` as it is, cut and stretched, random garbage, and ``sound`` with a 32-bit
    field anywhere set to an extreme or to one of ``sizes`` (entry sizes around the function's limits)."""
    samples = [b"", b"\x00" * 61, sound, sound[:-1], sound + b"\x00"]
    samples += [rng.randbytes(rng.randrange(garbage_bytes)) for _ in range(2000)]
    for _ in range(2000):
        buf = bytearray(sound)
        at = rng.randrange(len(buf) - 4)
        struct.pack_into(">i", buf, at, rng.choice([-(2**31), -1, 0, *sizes, 2**31 - 1, rng.randrange(2**31)]))
        samples.append(bytes(buf))
    return samples


def test_the_compiled_function_takes_any_bytes(tmp_path):
    """Garbage, and sound messages cut or stretched anywhere: None or a result, never a crash or a read outside."""
    fn = small._small_legacy_v2
    rng = random.Random(7)
    sound = b"".join(_message(i, i % 2, i % 3 == 0, 1000 + i, b"k" * i, b"v" * (2 * i)) for i in range(6))
    samples = [b"\x00" * 17, *_hostile(sound, rng, [13, 14, 25, 26], 200)]
    converted = 0
    for data in samples:
        for base in (0, 3, -1, 2**62):
            out = fn(data, base, 1_500_000_000_000, True, 0, True, 1, 1_000_000, 2**31 - 1)
            assert out is None or len(out) == 10
            converted += out is not None
    assert converted >= 2  # the sound segment, at a base it fits
    assert fn(sound, 0, 1, True, 0, False, 4096, 1_000_000, 2**31 - 1)[5:7] == (0, 5)
    with pytest.raises(TypeError):
        fn("not bytes", 0, 1, True, 0, False, 4096, 1_000_000, 2**31 - 1)


def _checks(result, options, monkeypatch):
    """verify_segment's check of ``result`` by the whole read-back and by the general one."""
    whole = verify_segment(result, options)
    real = verify._small_v2_records
    monkeypatch.setattr(verify, "_small_v2_records", None)
    try:
        general = verify_segment(result, options)
    finally:
        monkeypatch.setattr(verify, "_small_v2_records", real)
    return dataclasses.asdict(whole), dataclasses.asdict(general)


def test_a_small_output_reads_back_as_the_general_reader_reads_it(tmp_path, monkeypatch):
    """Every fixture segment's output, sound and then damaged (bytes flipped, cut, its CRCs made right again for half
    of the cases): the same verdict, problems, batches, records and digest by either read-back."""
    rng = random.Random(11)
    options = ConvertOptions(index_interval_bytes=64)
    read_whole_outputs = 0
    for path in FIXTURE_SEGMENTS:
        base = int(path.stem)
        source = _source(tmp_path / "src" / path.parent.name, path.read_bytes(), base)
        try:
            result = convert.convert_segment(SegmentTask(str(source), str(tmp_path / path.parent.name), base, options))
        except LocatedError:
            continue
        if not result.outputs:
            continue
        whole, general = _checks(result, options, monkeypatch)
        assert whole == general and whole["ok"], path
        log = Path(result.outputs[FileKind.LOG])
        sound = log.read_bytes()
        read_whole_outputs += verify._small_v2_records(sound) is not None
        for _ in range(30 if len(sound) > 1 else 0):
            buf = bytearray(sound)
            for _ in range(rng.choice([1, 2, 4])):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            if rng.random() < 0.2:
                del buf[rng.randrange(1, len(buf)) :]
            if rng.random() < 0.5:
                fuzz.fix_crcs(buf)
            log.write_bytes(bytes(buf))
            os.utime(log, ns=(result.mtime_ns, result.mtime_ns))
            whole, general = _checks(result, options, monkeypatch)
            assert whole == general, (path, whole["problems"][:2], general["problems"][:2])
        log.write_bytes(sound)
    assert read_whole_outputs >= 10, read_whole_outputs  # the fixtures' plain legacy segments, read back whole


def test_the_compiled_read_back_takes_any_bytes():
    """Garbage, and a sound small output cut or stretched anywhere: None or a result, never a crash."""
    fn = verify._small_v2_records
    rng = random.Random(5)
    sound = b"".join(
        small._small_legacy_v2(
            b"".join(_message(i, 0, False, -1, b"k" * i, None if i % 3 == 0 else b"v" * i) for i in range(5)),
            0, 1_500_000_000_000, True, 0, False, 4096, 1_000_000, 2**31 - 1,
        )[:1]
    )  # fmt: skip
    samples = _hostile(sound, rng, [13, 14, 60, 61], 300)
    read = 0
    for data in samples:
        out = fn(data)
        assert out is None or len(out) == 6
        read += out is not None
    assert read >= 1 and fn(sound)[4] == 5
