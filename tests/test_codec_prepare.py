"""A started broker builds the codec of the APIs clients start with ahead of their first request
(`codec.prepare`), so that request does not wait for kio to import its schema module. Each test runs
in a fresh interpreter: in this one, other tests have loaded most versions already."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What serving one request loads: kio modules, and whatever the codec's caches build on a miss.
WATCH = """
import sys
from logcore.protocol import bounds, codec
from logcore.protocol.codec import ApiKey
from logcore.protocol.connection import ServerConnection
from logcore.storage.records import encode_batch

CACHES = (codec.request_class, codec.response_class, codec._reader, codec._encoder, bounds._entity_check)

def loaded():
    return set(sys.modules), [cache.cache_info().misses for cache in CACHES]

def serve_produce(version):
    records = encode_batch([(None, b"v")], timestamp_ms=0)
    request = codec.build(codec.request_class(ApiKey.PRODUCE, version), {
        "acks": -1, "timeout": 30000, "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]})
    conn = ServerConnection({ApiKey.PRODUCE: (3, version)})
    conn.receive_data(codec.encode_request(request, correlation_id=1))
    event = conn.next_event()
    assert event.error is None, event.error_message
    conn.send(event, {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 0}]}]})
"""


def run(script: str) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WATCH) + textwrap.dedent(script)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_prepared_version_serves_its_first_request_without_loading_anything():
    run("""
        codec.prepare(0, 12)
        modules, misses = loaded()
        serve_produce(12)
        after, misses_after = loaded()
        assert after - modules == set(), sorted(after - modules)
        assert misses_after == misses, (misses, misses_after)
    """)


def test_an_unprepared_version_loads_its_schema_on_the_first_request():
    """(So the test above would fail if `prepare` did nothing.)"""
    run("""
        modules, misses = loaded()
        serve_produce(12)
        after, _ = loaded()
        assert any(name.startswith("kio.schema.produce.v12") for name in after - modules)
    """)


def test_a_started_broker_prepares_the_newest_versions_clients_start_with(tmp_path):
    run(f"""
        import asyncio
        from kio.schema.index import api_key_map
        from logcore.broker import PREPARED_APIS, Broker

        async def main():
            broker = Broker({str(tmp_path / "data")!r}, port=0)
            await broker.start()
            try:
                newest = {{api_key: broker.server.supported[api_key][1] for api_key in PREPARED_APIS}}
                schemas = {{f"kio.schema.{{api_key_map[a]}}.v{{v}}" for a, v in newest.items()}}
                for _ in range(1000):  # (one API per turn of the loop; seconds on a busy machine)
                    if schemas <= set(sys.modules):
                        break
                    await asyncio.sleep(0.01)
                else:
                    raise AssertionError(f"not prepared: {{sorted(schemas - set(sys.modules))}}")
                modules, misses = loaded()
                for api_key, version in newest.items():
                    codec.prepare(api_key, version)
                assert loaded() == (modules, misses), "the broker prepared them only in part"
            finally:
                await broker.stop()

        asyncio.run(main())
    """)
