"""Who may drive a cluster run: Dask's TLS with mutual authentication, and nothing unencrypted off this host.

Workers on broker hosts can rename and delete Kafka's data, and a Dask scheduler runs whatever code its clients
send, so a run against a scheduler on another host uses ``distributed.security.Security``: one CA for the cluster, a
certificate for the scheduler, for each worker and for the client; Dask then requires a certificate signed by that CA
from every peer (``verify_mode = CERT_REQUIRED``) and checks no host names (a dedicated CA, IP addresses). A remote
scheduler address without TLS is refused unless the operator passes ``--insecure``. The LocalCluster a run starts
listens on 127.0.0.1 only, dashboard included, unless a ``--dashboard-address`` says otherwise.

A TLS directory holds ``ca.pem`` and ``client.pem`` + ``client-key.pem`` (the README shows how to make them, and the
scheduler's and workers', with openssl).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from migrate.errors import MigrateError

CA_FILE = "ca.pem"
CLIENT_CERT = "client.pem"
CLIENT_KEY = "client-key.pem"


class InsecureSchedulerError(MigrateError):
    """A scheduler on another host reached without TLS: anyone on the network could drive the brokers' workers."""


@dataclass(frozen=True)
class TlsFiles:
    ca_file: str
    cert: str
    key: str

    @classmethod
    def from_dir(cls, folder: str | Path) -> TlsFiles:
        root = Path(folder)
        files = cls(str(root / CA_FILE), str(root / CLIENT_CERT), str(root / CLIENT_KEY))
        missing = [p for p in (files.ca_file, files.cert, files.key) if not Path(p).is_file()]
        if missing:
            raise MigrateError(
                f"--tls-dir {folder}: missing {', '.join(missing)}. It must hold the cluster's CA certificate "
                f"({CA_FILE}) and this client's certificate and key ({CLIENT_CERT}, {CLIENT_KEY}) signed by it; "
                "the README shows the openssl commands."
            )
        return files

    def security(self):  # -> distributed.security.Security
        from distributed.security import Security

        return Security(
            require_encryption=True,
            tls_ca_file=self.ca_file,
            tls_client_cert=self.cert,
            tls_client_key=self.key,
        )


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
        except OSError:
            return False


def check_scheduler_address(address: str, tls: TlsFiles | None, insecure: bool) -> None:
    """Refuse what would let someone else in: a remote scheduler without TLS (unless ``insecure``), or TLS files
    given for an address that does not speak TLS."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    scheme, host = parts.scheme, parts.hostname or ""
    if scheme == "tls":
        if tls is None:
            raise MigrateError(
                f"{address} speaks TLS: give --tls-dir with the cluster's CA and this client's certificate and key"
            )
        return
    if tls is not None:
        raise MigrateError(f"--tls-dir was given but {address} is not a tls:// address; use tls://{host}:{parts.port}")
    if not _is_loopback(host) and not insecure:
        raise InsecureSchedulerError(
            f"refusing to drive the scheduler at {address} without TLS: its workers run on broker hosts and can rename "
            "and delete Kafka's data, and anyone who reaches an unauthenticated scheduler can run code on them. Start "
            "the scheduler and workers with --tls-ca-file/--tls-cert/--tls-key and use tls://, with --tls-dir here; "
            "or pass --insecure if this network is trusted."
        )
