"""The request bounds check (logcore/protocol/bounds.py) against kio's own reader and writer, for
every request version kio knows: what a client writes passes and reads back unchanged; a length
that overruns the frame or a null where the schema has none is a MalformedRequest, never a call
into kio's native reader (which aborts the process on a huge length, see docs/broker.md)."""

import io
import random
import subprocess
import sys
import textwrap

import pytest
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer

from logcore.protocol import codec
from logcore.protocol.bounds import MalformedRequest, check_request
from samples import sample


def has_request(api_key: int, version: int) -> bool:
    try:
        codec.request_class(api_key, version)
    except Exception:
        return False
    return True


VERSIONS = [(key, version) for key in sorted(api_key_map) for version in range(20) if has_request(key, version)]


def request_frame(cls: type, entity, client_id: str | None = "client-1") -> bytes:
    """Header and body as a client writes them (no size prefix)."""
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                                             correlation_id=7, client_id=client_id))
    entity_writer(cls)(buf, entity)
    return buf.getvalue()


def encoded(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_what_a_client_writes_passes_and_reads_back(api_key, version):
    cls = codec.request_class(api_key, version)
    for seed in range(20):
        entity = codec.build(cls, sample(cls, random.Random(seed * 7919 + api_key * 31 + version), [], strict=True))
        frame = request_frame(cls, entity, None if seed % 3 else "c")
        header, body = codec.read_request(memoryview(frame), cls)
        unchecked, _size = entity_reader(cls)(frame, len(frame) - len(encoded(entity)))
        assert body == unchecked and header.correlation_id == 7


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_every_truncation_is_refused(api_key, version):
    cls = codec.request_class(api_key, version)
    entity = codec.build(cls, sample(cls, random.Random(api_key * 100 + version), [], strict=True))
    frame = request_frame(cls, entity)
    for cut in range(len(frame)):
        with pytest.raises(Exception) as caught:
            codec.read_request(memoryview(frame[:cut]), cls)
        assert isinstance(caught.value, MalformedRequest), f"cut at {cut}: {caught.value!r}"


def test_the_length_that_aborted_the_broker():
    """Metadata v12 with a compact topics array of 0xFFFFFFFF - 1 elements: kio reserved 32 GiB for
    it and the process died of SIGABRT. Now it is refused with the field and the bytes left (checked
    without calling kio, so a regression fails this test instead of aborting the test run)."""
    cls = codec.request_class(codec.ApiKey.METADATA, 12)
    header = request_frame(cls, codec.build(cls, {}))[:-4]  # header only: cut the empty body (4 bytes)
    with pytest.raises(MalformedRequest, match=r"topics: array of 4294967294 elements .* only 0 left"):
        check_request(header + bytes.fromhex("ffffffff0f"), cls.__header_schema__, cls)


@pytest.mark.parametrize(("api", "version", "field"), [
    (codec.ApiKey.LIST_OFFSETS, 1, "topics"), (codec.ApiKey.OFFSET_COMMIT, 2, "topics"),
    (codec.ApiKey.FIND_COORDINATOR, 4, "coordinator_keys"), (codec.ApiKey.FETCH, 7, "forgotten_topics_data"),
    (codec.ApiKey.PRODUCE, 3, "topic_data"), (codec.ApiKey.DESCRIBE_GROUPS, 0, "groups"),
    (codec.ApiKey.LIST_GROUPS, 4, "states_filter"), (codec.ApiKey.DESCRIBE_PRODUCERS, 0, "topics"),
    (codec.ApiKey.CREATE_TOPICS, 2, "topics"),
])
def test_null_where_the_schema_has_none_is_refused(api, version, field):
    """Each of these reached its handler as None and raised TypeError there."""
    cls = codec.request_class(api, version)
    frame = request_frame(cls, codec.build(cls, {field: None}))  # kio's writer puts the null on the wire
    with pytest.raises(MalformedRequest, match=f"{field}: null array where the schema allows none"):
        codec.read_request(memoryview(frame), cls)


def test_huge_lengths_everywhere_never_abort():
    """Every 4-byte window of a sample of every request version overwritten with lengths that
    claim billions of elements, and every byte with 0xff: all are read or refused, in a child
    process, because a miss here is an abort that no `except` can catch."""
    child = textwrap.dedent("""
        import io, random, struct, sys
        sys.path.insert(0, "tests")
        from kio.serial import entity_reader, entity_writer
        from logcore.protocol import codec
        from samples import sample
        from test_bounds import VERSIONS, request_frame
        patterns = [b"\\xff\\xff\\xff\\x0f", b"\\x7f\\xff\\xff\\xff", b"\\xff\\xff\\xff\\x07", b"\\x80\\x80\\x80\\x10"]
        tried = 0
        for api_key, version in VERSIONS:
            cls = codec.request_class(api_key, version)
            entity = codec.build(cls, sample(cls, random.Random(api_key * 100 + version), [], strict=True))
            frame = request_frame(cls, entity)
            for position in range(len(frame)):
                for pattern in patterns + [b"\\xff"]:
                    mutated = frame[:position] + pattern + frame[position + len(pattern):]
                    try:
                        codec.read_request(memoryview(mutated), cls)
                    except Exception:
                        pass
                    tried += 1
        print(tried)
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    assert int(done.stdout) > 10_000
