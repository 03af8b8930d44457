"""Real consumers reading a log dir through the read-only endpoint (``migrate.serve``), judged record by record
against Kafka's own reader: ``clients`` (which consumers, run how), ``run`` (one driver run), ``expected`` (Kafka's
records), ``judge`` (the comparison), ``measure`` (all of it for one client and one log dir); the drivers themselves
are in ``drivers/``, one per client, each self-contained in the client's own language."""
