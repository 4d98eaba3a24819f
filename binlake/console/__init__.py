"""`binlake console`: a web console over a binlake (or any Kafka) cluster, its connect runtime and its
Spark sink."""
