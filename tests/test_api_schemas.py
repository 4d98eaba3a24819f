"""Every API version the broker advertises has a kio request and response schema (they are loaded
lazily, on the first request of that version, so a gap would otherwise show only then)."""

from logcore.api import load_handlers
from logcore.protocol.codec import ApiKey, has_schema


def test_kio_has_a_schema_for_every_advertised_version():
    supported = load_handlers()
    missing = [(ApiKey(key).name, version) for key, (low, high) in supported.items()
               for version in range(low, high + 1) if not has_schema(key, version)]
    assert supported and not missing, missing
