"""The fault schedule of bench/faults.py against logcore and Apache Kafka side by side (issue 34):
three logcore brokers and a ZooKeeper, and three Apache Kafka 4.1 nodes in KRaft mode (each a broker
and a controller voter), each node in a network namespace of its own (testkit/faults), RF 3,
min.insync.replicas=2, unclean election off, the same workloads, checkers and seeded cycles, one
cluster after the other. Needs root and `make reference`.

    .venv/bin/python bench/faults_versus.py [--seeds 1] [--cycles 0] [--targets logcore kafka]
                                            [--fault-s 8] [--recover-s 6] [--rate 50]

--cycles 0 inflicts each fault once, in order; N > 0 draws N seeded cycles per seed (the same kinds
in the same order on both: the draws do not depend on the cluster). ZooKeeper's faults map onto
Kafka's controller quorum (testkit/faults/kraft.py): "cut off from ZooKeeper" cuts a node off from
the other controllers, and a split always leaves the quorum with the majority. Failure detection is
6 s on both (ZooKeeper's session, `broker.session.timeout.ms`), a follower leaves the ISR after 4 s.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this tree (testkit/ is not installed)

from testkit.faults import liveness, nemesis  # noqa: E402
from testkit.faults.cluster import FaultCluster  # noqa: E402
from testkit.faults.kraft import KraftFaultCluster  # noqa: E402

TARGETS = {"logcore": FaultCluster, "kafka": KraftFaultCluster}


def run_alone(target: str, seed: int, args) -> nemesis.Report:
    """`run` in a process of its own: a client the workloads leave behind (a transactional producer
    still aborting) must not reach the next cluster, whose nodes get the same addresses."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(run, (target, seed, args))


def run(target: str, seed: int, args) -> nemesis.Report:
    cycles = args.cycles or len(nemesis.FAULTS)
    with tempfile.TemporaryDirectory(prefix=f"bench-faults-{target}-") as base, \
            TARGETS[target](Path(base)) as cluster:
        started = time.monotonic()
        report = nemesis.run(cluster, seed, cycles, rate=args.rate, fault_s=args.fault_s, recover_s=args.recover_s,
                             in_order=not args.cycles, log=lambda line: print(f"  {target}: {line}", flush=True))
        print(f"{target}, seed {seed}: {report.acked} of {report.sent} writes acknowledged, transactions "
              f"{report.txns}, {time.monotonic() - started:.0f} s", flush=True)
        return report


def seconds(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "none"


def table(reports: dict[str, nemesis.Report]) -> str:
    targets = list(reports)
    head = " | ".join(f"{t} heal → ack (s) | {t} longest gap (s)" for t in targets)
    lines = [f"| fault | {head} |", "| --- |" + " --- |" * 2 * len(targets)]
    for cycles in zip(*(r.cycles for r in reports.values())):
        kinds = {c.kind for c in cycles}
        assert len(kinds) == 1, f"the schedules differ: {kinds}"
        cells = " | ".join(f"{seconds(c.heal_to_ack)} (broker {c.target}) | {seconds(c.longest_gap)}" for c in cycles)
        lines.append(f"| {cycles[0].kind} | {cells} |")
    for target, report in reports.items():
        found = ", ".join(f"{kind} {len(items)}" for kind, items in sorted(report.anomalies.items())) or "none"
        lines.append(f"\n{target}: anomalies {found}")
        for kind, items in sorted(report.anomalies.items()):
            lines.append(f"  {kind}: e.g. {items[:3]}")
    return "\n".join(lines)


def summary(runs: dict[str, list[nemesis.Report]]) -> str:
    """Per fault kind over every seed: heal → first ack and longest gap, median / worst, per target;
    then each target's anomalies of every class, summed."""
    targets = list(runs)
    head = " | ".join(f"{t} heal → ack | {t} longest gap" for t in targets)
    lines = [f"| fault | cycles | {head} |", "| --- | --- |" + " --- |" * 2 * len(targets)]
    for kind in nemesis.FAULTS:
        per_target = [liveness.cycles_of(runs[target], kind) for target in targets]
        if count := max(map(len, per_target)):
            lines.append(f"| {kind} | {count} | {' | '.join(c for cycles in per_target for c in liveness.cells(cycles))} |")
    for target in targets:
        found: dict[str, int] = {}
        for report in runs[target]:
            for kind, items in report.anomalies.items():
                found[kind] = found.get(kind, 0) + len(items)
        acked = sum(r.acked for r in runs[target])
        sent = sum(r.sent for r in runs[target])
        lines.append(f"\n{target}: {len(runs[target])} seeds, {acked} of {sent} writes acknowledged, anomalies "
                     + (", ".join(f"{kind} {n}" for kind, n in sorted(found.items())) or "none"))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--cycles", type=int, default=0, help="seeded random cycles (0: each fault once, in order)")
    parser.add_argument("--targets", nargs="+", choices=list(TARGETS), default=list(TARGETS))
    parser.add_argument("--fault-s", type=float, default=8.0)
    parser.add_argument("--recover-s", type=float, default=6.0)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    runs: dict[str, list[nemesis.Report]] = {target: [] for target in args.targets}
    failed = []
    for seed in args.seeds:
        reports = {}
        for target in args.targets:
            try:
                reports[target] = run_alone(target, seed, args)
            except Exception as exc:  # (a cluster that would not start or heal: said, and the others go on)
                failed.append(f"{target}, seed {seed}: {exc!r}"[:2000])
                print(f"{target}, seed {seed} could not run: {failed[-1]}", flush=True)
        print(f"\nseed {seed}, {args.fault_s:.0f} s faults:\n{table(reports)}\n", flush=True)
        for target, report in reports.items():
            runs[target].append(report)
        done = args.seeds[:args.seeds.index(seed) + 1]  # (after every seed: a run cut short still has its figures)
        print(f"seeds {done}, {args.fault_s:.0f} s faults, heal → first ack and longest gap in seconds, "
              f"median / worst:\n{summary(runs)}\n", flush=True)
    for line in failed:
        print(f"could not run: {line}")
    sys.exit(1 if failed or any(r.anomalies for reports in runs.values() for r in reports) else 0)


if __name__ == "__main__":
    main()
