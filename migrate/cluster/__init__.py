"""A cluster run over a manifest (``migrate.model.cluster_manifest``): each broker runs the verb over its own part, on
its own host, and the client gathers small outcomes."""
