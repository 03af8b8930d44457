"""The name operators give Dask to watch a migration: ``dask scheduler --preload migrate.monitor`` adds the plugin
and serves the pages; ``migrate.monitor`` in ``distributed.scheduler.http.routes`` serves the pages (the Dask engine
configures it so for a LocalCluster it starts).

What it serves lives in ``migrate.watch``: the events (``events``), their fold (``tally``), the scheduler plugin
(``plugin``), the Prometheus collector (``prometheus``), the worker logs forwarded to the client (``worker_logs``)
and the pages (``http``, ``page.html``).
"""

from __future__ import annotations

from typing import Any

from migrate.watch.http import routes
from migrate.watch.plugin import PLUGIN_NAME, MigrationPlugin

__all__ = ["dask_setup", "routes"]


def dask_setup(scheduler: Any) -> None:
    """``dask scheduler --preload migrate.monitor``: the plugin, and the routes unless the config has them."""
    import dask
    from distributed.http.utils import get_handlers

    scheduler.add_plugin(MigrationPlugin(), name=PLUGIN_NAME, idempotent=True)
    if __name__ not in dask.config.get("distributed.scheduler.http.routes"):
        prefix = dask.config.get("distributed.scheduler.http.prefix", default="") or ""
        scheduler.http_application.add_handlers(r".*", get_handlers(scheduler, [__name__], prefix))
