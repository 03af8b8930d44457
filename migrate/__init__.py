"""kafka-log-migrate: up-conversion of Kafka log segments from message format v0/v1 to v2, pre-staged beside running
brokers and cut over broker by broker."""

__version__ = "0.1.0"
