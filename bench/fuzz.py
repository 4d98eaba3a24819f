"""Fuzz a real `binlake broker` with mutated real-client requests and report what it took.

    .venv/bin/python bench/fuzz.py [--frames 1000000] [--seeds 1,2,3] [--connections 32]
                                   [--check-every 20000]
    .venv/bin/python bench/fuzz.py --replay CRASH.bin     # which of these frames kills a broker?

For each seed: a fresh broker, BASELINE records produced with acks=all, then the frames; every
--check-every frames a health check (alive, a produce/consume round trip, the baseline unchanged,
RSS within 2x of idle). Prints frames/s, connections cut by the broker, and RSS before and after.
A broker that dies leaves the last frames sent in a file, for --replay.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree, not the installed one

from testkit.brokerproc import BrokerProcess
from testkit.fuzz import record
from testkit.fuzz.health import FuzzFailure
from testkit.fuzz.run import Fuzzer


def fuzz(args) -> int:
    corpus = record.load()
    failed = 0
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            broker = BrokerProcess(Path(tmp) / "broker").start()
            try:
                fuzzer = Fuzzer(broker, corpus, seed, args.frames, args.connections, args.check_every,
                                crash_dir=Path.cwd(), progress=print)
                report = asyncio.run(fuzzer.run())
                print(report.summary())
                print("  mutations:", ", ".join(f"{n:,} {name}" for name, n in report.mutations.most_common()))
                print("  broker log:", len(broker.log().splitlines()), "lines")
            except FuzzFailure as exc:
                print(f"seed {seed}: FAILED: {exc}")
                failed += 1
            finally:
                broker.kill()
    return 1 if failed else 0


def replay(path: Path) -> int:
    """Send each frame of `path` on its own connection to a fresh broker until one kills it."""
    frames = record.load(path)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "broker").start()
        try:
            for i, frame in enumerate(frames):
                with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
                    sock.sendall(frame)
                    sock.shutdown(socket.SHUT_WR)
                    try:
                        while sock.recv(65536):
                            pass
                    except OSError:
                        pass
                if broker.proc.poll() is not None:
                    api_key, version = struct.unpack_from(">hh", frame, 4) if len(frame) >= 8 else (None, None)
                    print(f"frame {i} (api {api_key} v{version}, {len(frame)} bytes) killed the broker:\n{frame.hex()}")
                    print(broker.log()[-2000:])
                    return 1
            print(f"all {len(frames)} frames answered or refused; the broker is alive")
            return 0
        finally:
            broker.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--check-every", type=int, default=20_000)
    parser.add_argument("--replay", type=Path)
    args = parser.parse_args()
    return replay(args.replay) if args.replay else fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
