"""spark_sink — see docs/."""
