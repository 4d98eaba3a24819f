"""binlake — change data capture from MySQL/MariaDB onto a Kafka-compatible log."""
