"""Shared test fixtures: the legacy log dirs Apache Kafka's own builders wrote, and Kafka's oracle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"
LEGACY_LOGDIR = FIXTURES / "legacy-logdir"
EXPECTED = FIXTURES / "expected"
REAL_BROKER = FIXTURES / "real-broker"
ORACLE = SHARED / "oracle" / "oracle"

FIXTURE_SEGMENTS = sorted(LEGACY_LOGDIR.glob("*/*.log"))
VALID_FIXTURE_SEGMENTS = [p for p in FIXTURE_SEGMENTS if not p.parent.name.startswith("truncated-tail")]


@dataclass(frozen=True)
class CliResult:
    """What one in-process run of kafka-log-migrate returned and printed."""

    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    @property
    def text(self) -> str:
        """stdout then stderr, as an operator's terminal shows them."""
        return self.out + self.err


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> CliResult:
    """Run the CLI in this process (``migrate.cli.main``): its exit code and what this call alone printed."""
    from migrate.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def fixture_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def expected_lines(segment: Path) -> list[dict]:
    rel = segment.relative_to(segment.parent.parent)
    jsonl = EXPECTED / rel.parent / (rel.stem + ".jsonl")
    return [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]


def expected_summaries() -> dict[str, dict]:
    lines = (EXPECTED / "summary.jsonl").read_text().splitlines()
    return {d["path"]: d for d in map(json.loads, lines)}


def apply_mtimes(logdir: Path, manifest: Path) -> None:
    for rel, ms in json.loads(manifest.read_text()).items():
        target = logdir / rel
        if target.exists():
            os.utime(target, ns=(ms * 1_000_000, ms * 1_000_000))


def copy_logdir(src: Path, dst: Path, manifest: Path) -> Path:
    """A writable copy of a fixture log dir with the fixture mtimes restored (git does not keep mtimes)."""
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    dst.chmod(0o755)
    apply_mtimes(dst, manifest)
    return dst


@pytest.fixture(autouse=True)
def fresh_fault_counts():
    """Fault points count their passes per process; every test starts from zero."""
    from migrate.run import faults

    faults.reset()
    yield
    faults.reset()


@pytest.fixture(autouse=True)
def priority_kept():
    """A test that runs ``prestage`` in this process (``main([...])``) lowers the whole test process to nice 19 and
    the lowest I/O priority, as the verb does for its own process: every later test in it would then run behind
    anything else on the machine (beside a CPU hog, a fifth of the speed). Each test ends at the priority it began
    with (raising it back needs CAP_SYS_NICE: where it is missing the process stays lowered, slower, still right)."""
    import contextlib
    import ctypes
    import platform

    from migrate.prestage.priority import _SYSCALLS

    numbers = _SYSCALLS.get(platform.machine())
    libc = ctypes.CDLL(None, use_errno=True) if numbers is not None else None
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    io = libc.syscall(numbers[1], 1, 0) if libc is not None and numbers is not None else -1
    yield
    with contextlib.suppress(OSError):
        if os.getpriority(os.PRIO_PROCESS, 0) != nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    if libc is not None and numbers is not None and io >= 0:
        libc.syscall(numbers[0], 1, 0, io)


@pytest.fixture
def legacy_logdir(tmp_path: Path) -> Path:
    return copy_logdir(LEGACY_LOGDIR, tmp_path / "logdir", FIXTURES / "mtimes.json")


@pytest.fixture
def real_broker_logdir(tmp_path: Path) -> Path:
    return copy_logdir(REAL_BROKER / "logdir", tmp_path / "real-broker", REAL_BROKER / "mtimes.json")


def have_java() -> bool:
    return shutil.which("java") is not None and shutil.which("javac") is not None


class Oracle:
    """Apache Kafka's own record readers and builders (kafka-clients 3.9.1), run as ../shared/oracle/oracle."""

    def run(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(ORACLE), *map(str, args)], capture_output=True, text=True, timeout=600)
        if check and proc.returncode not in (0, 1):
            raise RuntimeError(f"oracle {args} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return proc

    def dump(self, *paths: str | Path) -> list[dict]:
        return [json.loads(line) for line in self.run("dump", *paths).stdout.splitlines() if line.strip()]

    def summary(self, *paths: str | Path) -> list[dict]:
        out = self.run("dump", "--summary", *paths).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def compare(self, a: str | Path, b: str | Path, timestamps: bool = False) -> list[dict]:
        args = ["compare", *(["--timestamps"] if timestamps else []), a, b]
        return [json.loads(line) for line in self.run(*args).stdout.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    if not have_java():
        pytest.skip(reason="the Kafka oracle needs java and javac 17+, which are not on the PATH")
    return Oracle()


def needs_root_power(reason: str) -> None:
    """A test that needs what root can do here (mount a tmpfs, a mount namespace, install a package) and cannot have
    it: as root, where CI runs, that is a failure, so CI never passes by skipping it; as another user, a skip that
    says why."""
    if os.geteuid() == 0:
        pytest.fail(f"{reason}, although this runs as root (.ci/run sets it up): is the container unprivileged?")
    pytest.skip(reason=reason)


def chromium_path() -> str:
    """Debian's chromium, for the tests that open pages in a real headless browser (.ci/run installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        needs_root_power("chromium is not installed (apt-get install chromium, as .ci/run does)")
    assert found is not None
    return found
