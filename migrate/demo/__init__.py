"""A self-contained demonstration: a broker-shaped log dir of legacy segments written by the one writer the demo,
the benchmarks and the tests share (``legacy_logdir``), then migrated end to end."""
