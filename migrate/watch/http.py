"""The migration's pages on the Dask dashboard server: ``/migration`` (``page.html``, which refreshes itself) and
``/migration/status.json`` (the plugin's ``status()``; ``?partitions=N`` keeps the N that need a look first).

Dask serves them from the modules named in ``distributed.scheduler.http.routes``, each with a ``routes`` list: this
one's is re-exported by ``migrate.monitor``, the name operators and the Dask engine configure.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from distributed.http.utils import RequestHandler

from migrate.watch.plugin import plugin_of


@functools.cache
def page() -> str:
    return resources.files("migrate.watch").joinpath("page.html").read_text(encoding="utf-8")


class StatusJSON(RequestHandler):
    def get(self) -> None:
        plugin = plugin_of(self.server)
        limit = self.get_argument("partitions", None)
        body = plugin.status(int(limit) if limit else None) if plugin else {"plan": None, "error": "no plugin"}
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(body))


class StatusPage(RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(page())


routes: list[tuple] = [("/migration/status.json", StatusJSON, {}), ("/migration", StatusPage, {})]
