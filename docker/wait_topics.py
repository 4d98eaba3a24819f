"""Wait until the named topics exist (a faust app subscribes only to topics that are there): the
compose demo's processors start once the connector has made the change topics they read."""

import sys
import time

from confluent_kafka.admin import AdminClient

bootstrap, topics = sys.argv[1], set(sys.argv[2:])
admin = AdminClient({"bootstrap.servers": bootstrap})
while missing := topics - set(admin.list_topics(timeout=10).topics):
    print(f"waiting for {', '.join(sorted(missing))}", flush=True)
    time.sleep(2)
