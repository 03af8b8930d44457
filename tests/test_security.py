"""Nobody else gets in: TLS with mutual authentication on a cluster, no plain remote scheduler, a loopback-only
LocalCluster."""

from __future__ import annotations

import os
import socket
import ssl

import psutil
import pytest
from cluster_harness import BrokerCluster, make_tls

from migrate.errors import MigrateError
from migrate.security import InsecureSchedulerError, TlsFiles, check_scheduler_address

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls(tmp_path_factory.mktemp("tls"))


def test_a_plain_remote_scheduler_is_refused_without_insecure(tls):
    with pytest.raises(InsecureSchedulerError, match=r"without TLS.*--insecure"):
        check_scheduler_address("tcp://10.1.2.3:8786", None, insecure=False)
    with pytest.raises(InsecureSchedulerError):
        check_scheduler_address("10.1.2.3:8786", None, insecure=False)
    check_scheduler_address("tcp://10.1.2.3:8786", None, insecure=True)  # the operator's explicit choice
    check_scheduler_address("tcp://127.0.0.1:8786", None, insecure=False)  # this host only
    with pytest.raises(MigrateError, match="give --tls-dir"):
        check_scheduler_address("tls://10.1.2.3:8786", None, insecure=False)
    check_scheduler_address("tls://10.1.2.3:8786", TlsFiles.from_dir(tls), insecure=False)


def test_only_a_client_with_a_certificate_from_the_cluster_ca_gets_in(tls, tmp_path):
    from distributed import Client
    from distributed.security import Security

    other = make_tls(tmp_path / "other-ca", names=("client",))
    with BrokerCluster(tls, {}, tmp_path / "data") as cluster:
        assert cluster.address.startswith("tls://")
        with Client(cluster.address, security=TlsFiles.from_dir(tls).security(), timeout=30) as client:
            assert client.run_on_scheduler(lambda: 42) == 42
        # a certificate signed by another CA, and no certificate at all, are both turned away
        stranger = Security(
            require_encryption=True,
            tls_ca_file=str(tls / "ca.pem"),
            tls_client_cert=str(other / "client.pem"),
            tls_client_key=str(other / "client-key.pem"),
        )
        with pytest.raises((OSError, TimeoutError)):
            Client(cluster.address, security=stranger, timeout=5)
        # a TLS peer that presents no certificate at all: the scheduler ends the handshake
        host, port = cluster.address.removeprefix("tls://").rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(tls / "ca.pem"))
        context.check_hostname = False
        with (
            socket.create_connection((host, int(port)), timeout=10) as raw,
            pytest.raises((ssl.SSLError, ConnectionError)),
            context.wrap_socket(raw) as conn,
        ):
            conn.sendall(b"\0" * 8)
            conn.recv(1)  # TLS 1.3: the server's refusal arrives with the first read


def test_a_local_cluster_run_listens_on_loopback_only(tmp_path):
    from migrate.engines.dask import DaskEngine

    before = set(psutil.Process().children(recursive=True))  # an earlier test's (Spark's JVM, a forkserver) lives on
    engine = DaskEngine(n_workers=2, dashboard_address="127.0.0.1:0", progress=False)
    try:
        link = engine.dashboard_link  # the cluster starts in the background: wait until it answers
        engine.start_workers(wait=True)
        pids = {os.getpid(), *(c.pid for c in set(psutil.Process().children(recursive=True)) - before)}
        listening = [
            c.laddr for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids
        ]
        assert listening, "the cluster listens somewhere"
        for addr in listening:
            assert addr.ip in ("127.0.0.1", "::1"), f"listening on {addr.ip}:{addr.port}"
        assert link.startswith("http://127.0.0.1:")
    finally:
        engine.close()
