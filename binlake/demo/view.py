"""How the demo prints: one line per change event as it arrives, and the closing summary table."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .events import Change, TableState

OP_STYLES = {"r": "blue", "c": "green", "u": "yellow", "d": "red", "ddl": "magenta", "tombstone": "dim"}
MIN_SUMMARY_WIDTH = 40


def _value(v) -> str:
    return repr(v) if isinstance(v, str) else "null" if v is None else str(v)


def _row(row: dict) -> str:
    return ", ".join(f"{k}={_value(v)}" for k, v in row.items())


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def summary(change: Change) -> str:
    """What changed: the new row, the old row, the columns an update changed (old → new), or the DDL."""
    if change.op == "ddl":
        return change.ddl or ""
    if change.op == "tombstone":
        return "(tombstone: compaction may drop this key)"
    if change.op == "u":
        changed = [f"{k}: {_value(change.before.get(k))} → {_value(v)}"
                   for k, v in change.after.items() if change.before.get(k) != v]
        return "; ".join(changed) or _row(change.after)  # (a processor's update may carry no old values)
    return _row(change.after if change.after is not None else change.before)


def event_line(console: Console, change: Change) -> None:
    """`topic op key summary @ position`, the summary clipped so the line fits the console."""
    key = "" if change.key is None else ",".join(map(str, change.key))
    head = f"  {change.topic:<22} {change.op:<9} {key:<7} "
    tail = f"  @ {change.position}" if change.position else ""
    text = _clip(summary(change), max(MIN_SUMMARY_WIDTH, console.width - len(head) - len(tail)))
    style = OP_STYLES.get(change.op, "")
    console.print(f"  {escape(change.topic):<22} [{style}]{change.op:<9}[/] {escape(key):<7} {escape(text)}"
                  f"[dim]{escape(tail)}[/]", soft_wrap=True, highlight=False)


def summary_table(tables: dict[str, TableState], source_keys: dict[str, set[tuple]], source: str) -> Table:
    """Per table: rows in the `source` server (MariaDB or MySQL), events by op, and whether the keys
    rebuilt from events match."""
    table = Table(title=f"{source} vs the change log", box=box.SIMPLE_HEAD)
    for column in ("table", f"rows in {source}", "events r/c/u/d", "ddl", "rows rebuilt", "match"):
        table.add_column(column, justify="left" if column == "table" else "right", no_wrap=True)
    for name in sorted(source_keys):
        state = tables.get(name, TableState())
        ops = "/".join(str(state.ops[op]) for op in "rcud")
        match = state.keys == source_keys[name]
        table.add_row(name, str(len(source_keys[name])), ops, str(state.ops["ddl"]), str(len(state.keys)),
                      "[green]yes[/]" if match else "[red]NO[/]")
    return table
