"""A real Dask cluster of "brokers" on one machine, for cluster tests.

- ``make_tls(folder)``: a CA and certificates for the scheduler, the workers and a client, made with openssl exactly
  as the README tells an operator to.
- ``BrokerCluster``: a TLS scheduler and one worker per broker. Each worker listens on its own loopback address
  (127.0.0.2, .3, ... : one "host" per broker, so tasks pin to it by host) and, where the kernel lets us (root,
  ``unshare -m``), runs in its own mount namespace with the broker's own directory bind-mounted onto one shared path,
  as every broker of a real cluster keeps its data at /var/lib/kafka/data. Without that privilege each broker keeps
  its own path and ``same_path`` is False.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import REPO

OPENSSL_DAYS = "2"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_tls(folder: Path, names: tuple[str, ...] = ("scheduler", "worker", "client")) -> Path:
    """``ca.pem`` and ``<name>.pem`` + ``<name>-key.pem`` for each name, signed by the CA (the README's commands)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        OPENSSL_DAYS,
        "-subj",
        "/CN=kafka-log-migrate CA",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        cwd=folder,
    )
    for name in names:
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}-key.pem",
            "-out",
            f"{name}.csr",
            cwd=folder,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-days",
            OPENSSL_DAYS,
            "-out",
            f"{name}.pem",
            cwd=folder,
        )
    return folder


def can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0


@dataclass
class BrokerCluster:
    tls: Path
    brokers: dict[int, Path]  # broker id -> the directory that is its data (bind-mounted onto ``data_path``)
    data_path: Path  # where every broker sees its own data, when in its own mount namespace
    preload: str | None = None
    same_path: bool = field(init=False, default=False)
    address: str = field(init=False, default="")
    hosts: dict[int, str] = field(init=False, default_factory=dict)
    procs: list[subprocess.Popen] = field(init=False, default_factory=list)

    def path_of(self, broker: int) -> Path:
        """Where broker ``broker``'s worker sees its data."""
        return self.data_path if self.same_path else self.brokers[broker]

    def __enter__(self) -> BrokerCluster:
        self.same_path = can_unshare()
        sched_file = self.tls / "scheduler.json"
        sched_file.unlink(missing_ok=True)
        # the engine's own no-workers timeout (60 s): at 5 s a broker's worker that a loaded machine kept from
        # answering for a few seconds lost its survey, and the line naming that broker's refusal was missing
        env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT": "60s", "PYTHONPATH": str(REPO)}
        cmd = [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--protocol",
            "tls",
            "--dashboard-address",
            "127.0.0.1:0",
            "--scheduler-file",
            str(sched_file),
            "--tls-ca-file",
            str(self.tls / "ca.pem"),
            "--tls-cert",
            str(self.tls / "scheduler.pem"),
            "--tls-key",
            str(self.tls / "scheduler-key.pem"),
        ]
        if self.preload:
            cmd += ["--preload", self.preload]
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.time() + 180  # the scheduler imports Dask: slow on a loaded machine
        while not (sched_file.exists() and sched_file.stat().st_size) and time.time() < deadline:
            time.sleep(0.1)
        self.address = json.loads(sched_file.read_text())["address"]
        for i, (broker, own) in enumerate(sorted(self.brokers.items())):
            host = f"127.0.0.{i + 2}"
            self.hosts[broker] = host
            worker = [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                self.address,
                "--host",
                host,
                "--nthreads",
                "1",
                "--nworkers",
                "1",
                "--no-dashboard",
                "--name",
                f"broker-{broker}",
                "--tls-ca-file",
                str(self.tls / "ca.pem"),
                "--tls-cert",
                str(self.tls / "worker.pem"),
                "--tls-key",
                str(self.tls / "worker-key.pem"),
            ]
            if self.same_path:
                self.data_path.mkdir(parents=True, exist_ok=True)
                script = f"mount --bind {own} {self.data_path} && exec " + " ".join(worker)
                worker = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
            self.procs.append(subprocess.Popen(worker, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if self.brokers:
            self._wait_for_workers(len(self.brokers))
        return self

    def _wait_for_workers(self, n: int) -> None:
        from distributed import Client

        from migrate.security import TlsFiles

        # each worker imports Dask and the package as it starts: on a loaded 2-core machine three of them took more
        # than a minute ("Only 0/3 workers arrived after 60"); a test waits for them, it does not race them
        with Client(self.address, security=TlsFiles.from_dir(self.tls).security(), timeout=60) as client:
            client.wait_for_workers(n, timeout=300)

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
