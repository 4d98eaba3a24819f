"""Liveness under faults (issue 34): a three-broker cluster on ZooKeeper, each broker and ZooKeeper
in a network namespace of its own (testkit/faults), RF 3, min.insync.replicas=2, unclean election
off, an idempotent acks=all producer at --rate and a transactional one; one cycle per fault (or
--cycles seeded ones), every checker run at the end. Needs root.

    .venv/bin/python bench/faults.py [--seed 1] [--cycles 0] [--fault-s 8] [--recover-s 6] [--rate 50]

For each fault: from the heal (the cut lifted, the process resumed or restarted) to the first
acknowledged write to the partition whose leader was hit, and the longest time without an
acknowledged write to it over the cycle (fault + recovery). ZooKeeper sessions end after 6 s and a
follower leaves the ISR after 4 s (replica.lag.time.max.ms), the cluster's settings in these runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this tree (testkit/ is not installed)

from testkit.faults import nemesis  # noqa: E402
from testkit.faults.cluster import FaultCluster  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cycles", type=int, default=0, help="seeded random cycles (0: each fault once, in order)")
    parser.add_argument("--fault-s", type=float, default=8.0)
    parser.add_argument("--recover-s", type=float, default=6.0)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as base, FaultCluster(Path(base)) as cluster:
        started = time.monotonic()
        if args.cycles:
            report = nemesis.run(cluster, args.seed, args.cycles, rate=args.rate, fault_s=args.fault_s,
                                 recover_s=args.recover_s)
        else:
            report = nemesis.run(cluster, args.seed, len(nemesis.FAULTS), rate=args.rate, fault_s=args.fault_s,
                                 recover_s=args.recover_s, kinds=nemesis.FAULTS, in_order=True)
        print(f"\n{report.acked} of {report.sent} writes acknowledged, transactions {report.txns}, "
              f"{time.monotonic() - started:.0f} s")
        print(f"\n| fault ({args.fault_s:.0f} s) | heal → first ack (s) | longest gap (s) |\n| --- | --- | --- |")
        for cycle in report.cycles:
            ack = f"{cycle.heal_to_ack:.2f}" if cycle.heal_to_ack is not None else "none"
            print(f"| {cycle.kind} (broker {cycle.target}) | {ack} | {cycle.longest_gap:.2f} |")
        acks = [c.heal_to_ack for c in report.cycles if c.heal_to_ack is not None]
        if acks:
            print(f"\nheal → first ack: median {statistics.median(acks):.2f} s, max {max(acks):.2f} s")
        print("anomalies:", "none" if not report.anomalies else "")
        for kind, items in sorted(report.anomalies.items()):
            print(f"  {kind}: {len(items)}, e.g. {items[:3]}")
        sys.exit(1 if report.anomalies else 0)


if __name__ == "__main__":
    main()
