"""Who may talk to the broker: listeners with their security protocols (listeners.py), TLS
(tls.py), SASL authentication (sasl.py, sans-IO, with users from Kafka's JAAS lines: jaas.py)."""
