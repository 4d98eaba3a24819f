"""A rich progress bar for snapshots: tables done, rows, rows/s and ETA per table."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text


class _RowsPerSecond(ProgressColumn):
    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} rows/s" if speed else "- rows/s")


class SnapshotProgress:
    """Used by one thread (others may read the counts, for metrics). The bar is drawn only when enabled,
    so the snapshot code has no branches for it; the counts are always kept."""

    def __init__(self, enabled: bool, tables: int) -> None:
        self.tables_total, self.tables_done = tables, 0
        self.rows_estimated = self.rows_read = 0  # tables begun so far: MySQL's TABLE_ROWS estimates, rows read
        self._progress = None
        if enabled:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      _RowsPerSecond(), TimeRemainingColumn())
            self._progress.start()
            self._tables = self._progress.add_task("tables", total=tables)
        self._task = None

    def table(self, name: str, estimated_rows: int) -> None:
        self.rows_estimated += estimated_rows
        if self._progress is not None:
            self._task = self._progress.add_task(name, total=max(estimated_rows, 1))

    def rows(self, n: int) -> None:
        self.rows_read += n
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, n)

    def table_done(self) -> None:
        self.tables_done += 1
        if self._progress is not None:
            task = self._progress.tasks[self._task] if self._task is not None else None
            if task is not None:
                self._progress.update(self._task, total=task.completed)
            self._progress.advance(self._tables)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
