"""The `binlake` command loads its subcommands lazily, and still lists every one with its own help."""

from __future__ import annotations

import subprocess
import sys

import click

from binlake.cli import SUBCOMMANDS, main

HEAVY = ("logcore", "connect", "cdc", "aiokafka", "confluent_kafka", "binlake.demo")


def test_every_listed_help_is_the_commands_own():
    ctx = click.Context(main)
    for name, (_target, help_text) in SUBCOMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
        assert help_text == command.get_short_help_str(limit=200), name


def test_help_lists_every_subcommand_without_importing_any():
    probe = ("import sys\nfrom binlake.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             f"print('LOADED', sorted(m for m in sys.modules if m.startswith({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    for name in SUBCOMMANDS:
        assert name in out
    assert out.strip().endswith("LOADED []"), out.splitlines()[-1]


def test_subcommand_runs_after_lazy_load():
    out = subprocess.run([sys.executable, "-m", "binlake.cli", "topics", "create", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "Usage: python -m binlake.cli topics create" in out
    assert "--bootstrap-server" in out
