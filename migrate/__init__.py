"""kafka-log-migrate: offline up-conversion of Kafka log segments (message format v0/v1 to v1/v2)."""

__version__ = "0.1.0"
