"""Liveness under faults (issue 34): a three-broker cluster on ZooKeeper, each broker and ZooKeeper
in a network namespace of its own (testkit/faults), RF 3, min.insync.replicas=2, unclean election
off, an idempotent acks=all producer at --rate and a transactional one; one cycle per fault (or
--cycles seeded ones), every checker run at the end. Needs root.

    .venv/bin/python bench/faults.py [--seed 1] [--seeds 1] [--cycles 0] [--fault-s 8] [--recover-s 6] [--rate 50]
    nice .venv/bin/python bench/faults.py --seeds 20 --cycles 12     # issue 34's 20 seeds x 12 cycles

For each fault: from the heal (the cut lifted, the process resumed or restarted) to the first
acknowledged write to the partition whose leader was hit, and the longest time without an
acknowledged write to it over the cycle (fault + recovery): the median and the worst over every
cycle of that fault in every seed (a fresh cluster each); then the anomalies of every class. ZooKeeper
sessions end after 6 s and a follower leaves the ISR after 4 s (replica.lag.time.max.ms), the
cluster's settings in these runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this tree (testkit/ is not installed)

from testkit.faults import liveness, nemesis  # noqa: E402
from testkit.faults.cluster import FaultCluster  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def liveness_table(reports: list[nemesis.Report], fault_s: float) -> str:
    """Per fault kind over every cycle of every seed: heal → first ack and longest gap, median and worst."""
    lines = [f"| fault ({fault_s:.0f} s) | cycles | heal → first ack, median / worst (s) | "
             "longest gap, median / worst (s) |", "| --- | --- | --- | --- |"]
    for kind in nemesis.FAULTS:
        if cycles := liveness.cycles_of(reports, kind):
            ack, gap = liveness.cells(cycles)
            lines.append(f"| {kind} | {len(cycles)} | {ack} | {gap} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="the first seed")
    parser.add_argument("--seeds", type=int, default=1, help="seeds --seed, --seed+1, ...: a fresh cluster each")
    parser.add_argument("--cycles", type=int, default=0, help="seeded random cycles (0: each fault once, in order)")
    parser.add_argument("--fault-s", type=float, default=8.0)
    parser.add_argument("--recover-s", type=float, default=6.0)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')}, load average {load()}", flush=True)
    started, reports, failed = time.monotonic(), [], []
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            with tempfile.TemporaryDirectory(prefix="bench-faults-") as base, FaultCluster(Path(base)) as cluster:
                cycles = args.cycles or len(nemesis.FAULTS)
                reports.append(nemesis.run(cluster, seed, cycles, rate=args.rate, fault_s=args.fault_s,
                                           recover_s=args.recover_s, in_order=not args.cycles, log=lambda _: None))
        except Exception as exc:  # (a seed that cannot run is reported, the others still run)
            failed.append(seed)
            print(f"seed {seed}: did not run to the end: {exc!r}", flush=True)
            continue
        print(reports[-1].summary(), f"load average {load()}", sep="\n", flush=True)
    acked, sent = sum(r.acked for r in reports), sum(r.sent for r in reports)
    txns = {o: sum(r.txns.get(o, 0) for r in reports) for o in ("committed", "aborted", "indeterminate")}
    print(f"\n{len(reports)} seed(s) of {args.cycles or len(nemesis.FAULTS)} cycles, {acked} of {sent} writes "
          f"acknowledged, transactions {txns}, {time.monotonic() - started:.0f} s, "
          f"load average at the end {load()}")
    print("\n" + liveness_table(reports, args.fault_s))
    found = {kind: sum(len(r.anomalies.get(kind, [])) for r in reports)
             for kind in {*nemesis.ANOMALY_CLASSES, *(k for r in reports for k in r.anomalies)}}
    print("\nanomalies: " + ", ".join(f"{kind} {found[kind]}" for kind in sorted(found)))
    for report in reports:
        for kind, items in sorted(report.anomalies.items()):
            print(f"  seed {report.seed} {kind}: {len(items)}, e.g. {items[:3]}")
    if failed:
        print(f"seeds that did not run to the end: {failed}")
    sys.exit(1 if failed or any(r.anomalies for r in reports) else 0)


if __name__ == "__main__":
    main()
