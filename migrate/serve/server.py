"""The endpoint's socket: a thread per connection, requests answered in the order they arrive on it (as a broker
answers them), on a loopback address unless told otherwise.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import socketserver
import struct
import threading
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

from migrate.errors import MigrateError
from migrate.serve.handlers import Responder
from migrate.serve.header import MAX_FRAME
from migrate.serve.log import ServedLog, open_log

_SIZE = struct.Struct(">i")


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    parts, got = [], 0
    while got < size:
        part = sock.recv(min(size - got, 1 << 20))
        if not part:
            return None
        parts.append(part)
        got += len(part)
    return b"".join(parts)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, responder: Responder) -> None:
        self.address_family = family
        self.responder = responder
        self.connections: set[socket.socket] = set()
        self.guard = threading.Lock()
        super().__init__(address, _Connection)


class _Connection(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        responder = self.server.responder
        with self.server.guard:
            self.server.connections.add(sock)
        try:
            while not responder.closing.is_set():
                head = _recv_exact(sock, 4)
                if head is None:
                    return
                (size,) = _SIZE.unpack(head)
                if size < 8 or size > MAX_FRAME:
                    responder.note(f"a frame of {size} bytes from {self.client_address}: not a Kafka client; closed")
                    return
                frame = _recv_exact(sock, size)
                if frame is None:
                    return
                try:
                    reply = responder.answer(frame)
                except Exception:  # a bug here must not take the endpoint down: this connection ends, others go on
                    responder.note(f"error answering {self.client_address}: {traceback.format_exc()}")
                    return
                if reply is None:
                    return
                if reply:
                    sock.sendall(reply)
        except OSError:
            return  # the client went away, or the endpoint is closing
        finally:
            with self.server.guard:
                self.server.connections.discard(sock)


class Endpoint:
    """The read-only Kafka endpoint over ``log_dirs``: ``with Endpoint(dirs) as e: ... e.bootstrap ...``.

    It refuses a host that is not loopback unless ``allow_remote``; the address it advertises in Metadata and
    FindCoordinator is ``advertised_host`` (default: the host it listens on, or this machine's name when that is a
    wildcard) and the port it got."""

    def __init__(
        self,
        log_dirs: Iterable[str | Path],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        allow_remote: bool = False,
        advertised_host: str | None = None,
        max_wait_cap_ms: int = 30_000,
        on_note: Callable[[str], None] | None = None,
    ) -> None:
        if not allow_remote and not is_loopback(host):
            raise MigrateError(
                f"refusing to listen on {host}: it is not a loopback address, so anyone who reaches this host could "
                "read the served data. Listen on 127.0.0.1 (the default), or pass --allow-remote to mean it."
            )
        self.log: ServedLog = open_log(log_dirs)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.responder = Responder(self.log, "", 0, max_wait_cap_ms=max_wait_cap_ms, on_note=on_note)
        try:
            self._server = _Server((host, port), family, self.responder)
        except OSError as exc:
            raise MigrateError(f"cannot listen on {host}:{port}: {exc.strerror}. Choose another --port.") from None
        bound_host, bound_port = self._server.server_address[:2]
        wildcard = bound_host in ("0.0.0.0", "::")
        self.host = str(bound_host)
        self.port = int(bound_port)
        self.responder.host = advertised_host or (socket.gethostname() if wildcard else self.host)
        self.responder.port = self.port
        self._thread: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        host = self.responder.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def start(self) -> Endpoint:
        self._thread = threading.Thread(target=self._server.serve_forever, name="kafka-endpoint", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def close(self) -> None:
        self.responder.closing.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        with self._server.guard:
            for sock in list(self._server.connections):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._server.server_close()

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
