"""Liveness over many fault cycles of one kind, as bench/faults.py and bench/faults_versus.py print it:
heal → first acknowledged write and the longest gap without one, each as median / worst."""

from __future__ import annotations

import statistics

from .nemesis import Cycle, Report


def cycles_of(reports: list[Report], kind: str) -> list[Cycle]:
    return [cycle for report in reports for cycle in report.cycles if cycle.kind == kind]


def cells(cycles: list[Cycle]) -> tuple[str, str]:
    """('median / worst' of heal → first ack, with how many cycles saw none; 'median / worst' of the
    longest gap), in seconds."""
    acks = [c.heal_to_ack for c in cycles if c.heal_to_ack is not None]
    gaps = [c.longest_gap for c in cycles if c.longest_gap is not None]
    missing = f" ({len(cycles) - len(acks)} with no ack)" if len(acks) < len(cycles) else ""
    ack = f"{statistics.median(acks):.2f} / {max(acks):.2f}{missing}" if acks else "none"
    gap = f"{statistics.median(gaps):.2f} / {max(gaps):.2f}" if gaps else "-"
    return ack, gap
