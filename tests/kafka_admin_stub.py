"""A Kafka broker's Admin API, as far as the rolling gate asks it, on a loopback port: ApiVersions, Metadata (v5),
DescribeConfigs (v1) and ListPartitionReassignments (v0), each request and response framed and encoded by aiokafka's
own protocol classes, so ``AdminApiGate`` runs its real client over a real socket. No Kafka broker runs here; what
this one answers is the test's cluster: its brokers (a broker whose port refuses connections is one that is
stopping), partitions and configs."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import struct
import threading
from dataclasses import dataclass, field

from aiokafka.protocol.admin import (
    ApiVersionResponse_v0,
    ApiVersionResponse_v1,
    ApiVersionResponse_v2,
    DescribeConfigsRequest_v1,
    DescribeConfigsResponse_v1,
    ListPartitionReassignmentsResponse_v0,
)
from aiokafka.protocol.metadata import MetadataResponse_v5

API_VERSIONS, METADATA, DESCRIBE_CONFIGS, LIST_REASSIGNMENTS = 18, 3, 32, 46
SUPPORTED = [(API_VERSIONS, 0, 2), (METADATA, 5, 5), (DESCRIBE_CONFIGS, 1, 1), (LIST_REASSIGNMENTS, 0, 0)]
STATIC_BROKER_CONFIG, TOPIC_CONFIG = 4, 1


@dataclass
class AdminCluster:
    """What the stub answers: broker id -> reachable (False: its port refuses, as a broker that is stopping),
    topic -> partitions (number, leader, replicas, isr), and configs by broker id and by topic (set on the topic)."""

    brokers: dict[int, bool]
    topics: dict[str, list[tuple[int, int, list[int], list[int]]]]
    broker_configs: dict[int, dict[str, str]] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)


class KafkaAdminStub:
    def __init__(self, cluster: AdminCluster) -> None:
        self.cluster = cluster
        stub = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with contextlib.suppress(ConnectionError, struct.error):
                    while True:
                        size = _read(self.request, 4)
                        if not size:
                            return
                        frame = _read(self.request, struct.unpack(">i", size)[0])
                        self.request.sendall(stub.answer(frame))

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        # a port nothing listens on: bound and closed, so connecting is refused at once
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.refused_port = s.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> KafkaAdminStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, frame: bytes) -> bytes:
        api_key, version, correlation_id, client_len = struct.unpack_from(">hhih", frame)
        body = frame[10 + max(client_len, 0) :]
        header = struct.pack(">i", correlation_id)
        if api_key == API_VERSIONS:
            kind = {0: ApiVersionResponse_v0, 1: ApiVersionResponse_v1, 2: ApiVersionResponse_v2}[version]
            response = kind(0, SUPPORTED) if version == 0 else kind(0, SUPPORTED, 0)
        elif api_key == METADATA:
            response = self.metadata()
        elif api_key == DESCRIBE_CONFIGS:
            response = self.configs(DescribeConfigsRequest_v1.decode(body))
        elif api_key == LIST_REASSIGNMENTS:
            header += b"\x00"  # a flexible response's header: no tagged fields
            response = ListPartitionReassignmentsResponse_v0(0, 0, None, [], {})
        else:
            raise ConnectionError(f"the stub does not answer api key {api_key}")
        payload = header + response.encode()
        return struct.pack(">i", len(payload)) + payload

    def metadata(self) -> MetadataResponse_v5:
        c = self.cluster
        brokers = [
            (b, "127.0.0.1", self.port if up else self.refused_port, None) for b, up in sorted(c.brokers.items())
        ]
        topics = [
            (0, name, False, [(0, number, leader, replicas, isr, []) for number, leader, replicas, isr in parts])
            for name, parts in c.topics.items()
        ]
        return MetadataResponse_v5(0, brokers, "stub-cluster", min(c.brokers), topics)

    def configs(self, request: DescribeConfigsRequest_v1) -> DescribeConfigsResponse_v1:
        resources = []
        for kind, name, wanted in request.resources:
            if kind == 4:
                have, source, default = self.cluster.broker_configs.get(int(name), {}), STATIC_BROKER_CONFIG, True
            else:
                have, source, default = self.cluster.topic_configs.get(name, {}), TOPIC_CONFIG, False
            entries = [(key, value, False, source, False, []) for key, value in have.items() if key in wanted]
            if kind == 4 and "min.insync.replicas" in wanted and "min.insync.replicas" not in have:
                entries.append(("min.insync.replicas", "1", default, 5, False, []))
            resources.append((0, None, kind, name, entries))
        return DescribeConfigsResponse_v1(0, resources)


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data
