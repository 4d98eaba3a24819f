"""Kafka wire protocol: kio codec wrapper, sans-IO connection, error classes."""
