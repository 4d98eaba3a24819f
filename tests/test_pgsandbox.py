"""The throwaway PostgreSQL (sandbox.postgres) that the sink's tests, the demo and bench start."""

from __future__ import annotations

from sandbox.postgres import start_postgres


def test_stop_shuts_the_server_down_rather_than_killing_it(tmp_path):
    # (As root it once ran under runuser, which did not pass the signal on: every stop waited 30 s.)
    server = start_postgres(tmp_path / "pg")
    assert server.sql("SELECT 1") == [(1,)]
    server.stop()
    assert server.proc.returncode == 0, f"stopped with {server.proc.returncode}, not a clean shutdown"
    assert "database system is shut down" in server.log_path.read_text()
    assert not server.data_dir.exists()
    assert not server.scratch_dir.exists(), "stop left the directory it made for the data behind"
