"""What a DaskEngine's bounded close does with what it cannot wait for: worker processes still starting when the run
is over, and a LocalCluster whose close is held up (a dashboard page polling its scheduler's event loop)."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any


def worker_processes() -> set[int]:
    """The pids of the Dask worker processes this process started (their nannies run here), by the name Dask's
    nanny gives them."""
    import multiprocessing

    return {p.pid for p in multiprocessing.active_children() if p.pid and p.name.startswith("Dask Worker process")}


def stop_starting_workers(cluster: Any, others: set[int]) -> None:
    """Workers still starting when the run is over are not waited for: a LocalCluster's close awaits each nanny's
    start, which awaits its worker process (a worker held up in its start held close as long). The worker processes
    of this process that are not ``others`` (another engine's, there before) and have not joined ``cluster``'s
    scheduler are ended (SIGTERM), so that those starts fail at once; no call is left to be told. (Dask's cluster
    lists a worker only once it has started: they are found among this process's children.)"""
    joined = {ws.pid for ws in cluster.scheduler.workers.values()}
    quiet_cluster_logs()  # their nannies' "failed to start" is this, not a fault
    for pid in worker_processes() - others - joined:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def quiet_cluster_logs(quiet: bool = True) -> None:
    """Silence what Dask and Tornado log from here on: a cluster that is being ended after the run's work (its
    starting workers stopped, or left to end with this process) logs that end (a nanny that "failed to start", a
    comm closed), which after the run's last line, on the terminal, would read as a failure of the run."""
    import logging

    for name in ["distributed", "tornado", *logging.root.manager.loggerDict]:
        if name.split(".")[0] in ("distributed", "tornado"):
            logging.getLogger(name).disabled = quiet  # a logger's own flag: each child is set too


def abandon(cluster: Any, plugin: Any) -> None:
    """A cluster left closing is not waited on at exit either (Dask's exit hook would give it another 10 s), and its
    page's Prometheus collector gives way at once: a later cluster of this process exports its own."""
    quiet_cluster_logs()
    if cluster is not None:
        from distributed.deploy.spec import SpecCluster

        SpecCluster._instances.discard(cluster)
    if plugin is not None and getattr(plugin, "collector", None) is not None:
        from migrate.watch.prometheus import unregister_collector

        with contextlib.suppress(Exception):  # its own close unregisters it too
            unregister_collector(plugin.collector)
        plugin.collector = None


def left_behind(timeout: float, local: bool, starting_workers: int) -> str:
    """What the terminal is told when close gave up after ``timeout`` seconds."""
    what = "its scheduler" if local else "the client's connection to the scheduler"
    if starting_workers:
        what += f" and {starting_workers} worker process(es) still starting"
    return (
        f"note: the Dask cluster did not close within {timeout:.0f} s (its event loop is held up, e.g. by a dashboard "
        f"page polling it): {what} left to stop when this process exits; the run's work and its state are complete "
        "and on disk"
    )
