"""The fuzzer (testkit/fuzz) against a real broker: mutated real-client requests, with a health
check every few thousand frames (alive, a produce/consume round trip, the records acknowledged
before the fuzzing unchanged, memory within 2x of idle). A short run per seed in the default
suite; the million-frame runs of issue 17 under -m slow (and bench/fuzz.py prints their figures)."""

import asyncio

import pytest

from testkit.fuzz import record
from testkit.fuzz.run import Fuzzer


def fuzz(broker, seed: int, frames: int, check_every: int, tmp_path):
    fuzzer = Fuzzer(broker, record.load(), seed, frames, check_every=check_every, crash_dir=tmp_path)
    report = asyncio.run(fuzzer.run())
    assert report.frames == frames
    assert report.answered > frames // 2, "most frames should reach the parser and be answered"
    assert len(report.health) >= frames // check_every + 1  # before, then about every check_every
    return report


@pytest.mark.parametrize("seed", [11, pytest.param(12, marks=pytest.mark.slow)])  # (a second seed: -m slow, for suite time)
def test_short_fuzz_run(broker, seed, tmp_path):
    fuzz(broker, seed, 20_000, 5_000, tmp_path)
    lines = broker.log().splitlines()
    assert len(lines) < 400, f"{len(lines)} log lines for 20,000 bad frames: bad input should be summarized"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_million_frames(broker, seed, tmp_path):
    fuzz(broker, seed, 1_000_000, 20_000, tmp_path)


def test_the_corpus_holds_every_kind_of_session():
    """Recorded from admin, produce, group and transaction sessions (python -m testkit.fuzz.record)."""
    api_keys = {int.from_bytes(frame[4:6], "big") for frame in record.load()}
    produce, fetch, join, commit, init_pid, end_txn, create = 0, 1, 11, 8, 22, 26, 19
    assert {produce, fetch, join, commit, init_pid, end_txn, create} <= api_keys
