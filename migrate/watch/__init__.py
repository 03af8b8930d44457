"""Watching a run: typed events and the one fold of them (bytes, rate, ETA) shared by the command line's progress and
the Dask dashboard page, the scheduler plugin, the Prometheus collector, worker-log forwarding and the run log."""
