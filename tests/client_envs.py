"""The client libraries the client tests run that the test extra cannot hold, each installed once into a cache outside
the repository (``~/.cache/kafka-log-migrate/clients``, or under ``$XDG_CACHE_HOME``) and reused:

- confluent-kafka at an affected version (``AFFECTED_CONFLUENT``) in a venv of its own, beside the current version
  the test extra installs;
- kafkajs with its LZ4 and snappy codecs (npm), for Node.js;
- the Java client: the kafka-clients jar (and lz4, snappy, zstd, slf4j) the oracle already fetched into its cache.

Whatever cannot be had here (no npm, no registry) raises ``Unavailable`` with the reason, which the tests skip with.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import ORACLE

from migrate.consumers.clients import default_cache

AFFECTED_CONFLUENT = "2.10.0"
KAFKAJS_PACKAGES = ("kafkajs@2.2.4", "kafkajs-lz4@1.2.1", "kafkajs-snappy@1.1.0")


class Unavailable(Exception):
    pass


@contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One installer at a time (two xdist workers, or two checkouts, may ask at once)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".install.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def confluent_python(version: str = AFFECTED_CONFLUENT, cache: Path | None = None) -> Path:
    """The python of a venv holding confluent-kafka ``version`` (made and cached on first use)."""
    cache = cache or default_cache()
    target = cache / f"confluent-kafka-{version}-py{sys.version_info.major}.{sys.version_info.minor}"
    python = target / "bin" / "python"
    with _locked(cache):
        if (target / "installed").exists():
            return python
        shutil.rmtree(target, ignore_errors=True)
        steps = [
            [sys.executable, "-m", "venv", str(target)],
            [str(python), "-m", "pip", "install", "--quiet", f"confluent-kafka=={version}"],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900, check=False)
            if done.returncode != 0:
                shutil.rmtree(target, ignore_errors=True)
                what = " ".join(step[-2:])
                raise Unavailable(f"cannot install confluent-kafka=={version} ({what}): {done.stderr[-600:]}")
        (target / "installed").write_text(version + "\n")
    return python


def kafkajs_modules(cache: Path | None = None) -> Path:
    """A node_modules holding kafkajs and its LZ4 and snappy codecs (npm install, cached), each loadable."""
    cache = cache or default_cache()
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        raise Unavailable("Node.js and npm are not on the PATH (apt-get install nodejs npm)")
    target = cache / ("-".join(p.replace("@", "-") for p in KAFKAJS_PACKAGES))
    modules = target / "node_modules"
    with _locked(cache):
        if not (target / "installed").exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            done = subprocess.run(
                [npm, "install", "--prefix", str(target), "--no-audit", "--no-fund", *KAFKAJS_PACKAGES],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if done.returncode != 0:
                shutil.rmtree(target, ignore_errors=True)
                raise Unavailable(f"npm could not install {' '.join(KAFKAJS_PACKAGES)}: {done.stderr[-600:]}")
            (target / "installed").write_text(" ".join(KAFKAJS_PACKAGES) + "\n")
    for codec in ("kafkajs-lz4", "kafkajs-snappy"):
        loads = subprocess.run(
            [node, "-e", f"require('{codec}')"],
            capture_output=True,
            text=True,
            env={**os.environ, "NODE_PATH": str(modules)},
            timeout=60,
            check=False,
        )
        if loads.returncode != 0:
            raise Unavailable(f"{codec} does not load in {modules} (its native build failed?): {loads.stderr[-400:]}")
    return modules


def oracle_jars() -> Path:
    """The oracle's jars (kafka-clients 3.9.1 and what it needs), fetched by the oracle's first run."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = Path(os.environ.get("ORACLE_HOME") or cache / "kafka-oracle")
    jars = home / "jars"
    if not (jars / "kafka-clients.jar").exists():
        subprocess.run([str(ORACLE), "version"], capture_output=True, timeout=600, check=False)
    if not (jars / "kafka-clients.jar").exists():
        raise Unavailable(f"the oracle did not fetch kafka-clients.jar into {jars} (run ../shared/oracle/build.sh)")
    return jars
