"""Kafka for test suites, without Docker: `KafkaServer` (a fresh log directory served on a free loopback port, in
process or in a child process) and `KafkaContainer` (the same in the shape of Testcontainers' class). The pytest
plugin (engine.testing.pytest_plugin, on by installing kafkalog) gives them as fixtures."""
from engine.testing.server import KafkaContainer, KafkaServer

__all__ = ["KafkaContainer", "KafkaServer"]
