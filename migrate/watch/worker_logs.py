"""Warnings and errors of worker processes, forwarded to the client's loggers (and so to its run log).

``ForwardWorkerLogs`` is a worker plugin: each record of the ``distributed`` and ``migrate`` loggers at WARNING or
above becomes an event on ``LOG_TOPIC`` (Dask's "Compute Failed" included), instead of a line on a LocalCluster's
terminal; ``reemit_worker_log`` is the client's subscription, which hands it to the logger of the same name there.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from migrate.errors import ModelError
from migrate.watch.events import LOG_TOPIC, WorkerLogRecord, decode_worker_log, encode

logger = logging.getLogger(__name__)

FORWARDED_LOGGERS = ("distributed", "migrate")


class _EventLogHandler(logging.Handler):
    """Publishes each record as an event the client subscribes to (the worker's stderr is not the operator's)."""

    def __init__(self, worker: Any) -> None:
        super().__init__(logging.WARNING)
        self.worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        try:
            forwarded = WorkerLogRecord(
                record.name,
                record.levelno,
                record.levelname,
                self.format(record),
                record.created,
                str(self.worker.address),
            )
            self.worker.log_event(LOG_TOPIC, encode(forwarded))
        except Exception:
            self.handleError(record)


class ForwardWorkerLogs(WorkerPlugin):
    """Warnings and errors of worker processes (Dask's "Compute Failed" included) go to the client as events,
    where the run log takes them, instead of to a LocalCluster's terminal. ``silence``: also stop printing them on
    the worker's own stderr (a LocalCluster's, which is the operator's terminal; a remote worker keeps its log)."""

    name = "kafka-log-migrate-logs"

    def __init__(self, silence: bool) -> None:
        self.silence = silence
        self.client = (os.getpid(), socket.gethostname())
        self.handler: _EventLogHandler | None = None
        self.saved: dict[str, tuple[list[logging.Handler], bool]] = {}

    def setup(self, worker: Any) -> None:
        if (os.getpid(), socket.gethostname()) == self.client:
            return  # a worker thread of the client's own process: its records reach the run log directly
        self.handler = _EventLogHandler(worker)
        for name in FORWARDED_LOGGERS:
            log = logging.getLogger(name)
            self.saved[name] = (list(log.handlers), log.propagate)
            if self.silence:
                for h in list(log.handlers):
                    if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                        log.removeHandler(h)
                log.propagate = False
            log.addHandler(self.handler)

    def teardown(self, worker: Any) -> None:
        for name, (handlers, propagate) in self.saved.items():
            log = logging.getLogger(name)
            for h in list(log.handlers):
                log.removeHandler(h)
            if self.silence:
                # a LocalCluster's worker is closing with the run: its last heartbeats fail against the closed
                # scheduler, and those tracebacks must not land on the operator's terminal after the report (a
                # logger with no handler at all would print them through logging's last resort)
                log.addHandler(logging.NullHandler())
                continue
            for h in handlers:
                log.addHandler(h)
            log.propagate = propagate
        self.saved.clear()


def reemit_worker_log(event: tuple[float, Any]) -> None:
    """Client side of ``ForwardWorkerLogs``: the record goes to the logger of the same name in this process."""
    _, msg = event
    try:
        forwarded = decode_worker_log(msg)
    except ModelError as exc:
        logger.warning("a worker's log record this client cannot read (another version of kafka-log-migrate?): %s", exc)
        return
    record = logging.makeLogRecord(
        {
            "name": forwarded.name,
            "levelno": forwarded.levelno,
            "levelname": forwarded.levelname,
            "msg": f"[worker {forwarded.worker}] {forwarded.msg}",
            "args": None,
            "created": forwarded.created,
        }
    )
    logging.getLogger(forwarded.name).handle(record)
