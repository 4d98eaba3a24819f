"""Kafka's own Java tools (testkit.reference) driven from tests, by their script names."""

from __future__ import annotations

import json
import os
import subprocess
from functools import partial

from common.lifetime import die_with_parent
from testkit.reference import run_tool, tool_command


class KafkaTools:
    """Kafka's tools, by their script names (kafka-topics, ...), against one bootstrap address."""

    def __init__(self, address: str) -> None:
        self.address = address

    def run(self, tool: str, *args: str, input: str | None = None) -> str:
        """The tool's stdout; it must exit 0."""
        result = run_tool(tool, *args, input=input)
        assert result.returncode == 0, f"{tool} {' '.join(args)} exited {result.returncode}:\n" \
                                       f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        return result.stdout

    def refused(self, tool: str, *args: str) -> str:
        """What a tool that takes --bootstrap-server says when it fails (it must)."""
        result = run_tool(tool, "--bootstrap-server", self.address, *args)
        assert result.returncode != 0, f"{tool} {' '.join(args)} succeeded:\n{result.stdout[-3000:]}"
        return result.stdout + result.stderr

    def admin(self, tool: str, *args: str, input: str | None = None) -> str:
        """A tool that takes --bootstrap-server."""
        return self.run(tool, "--bootstrap-server", self.address, *args, input=input)

    def start(self, tool: str, *args: str, out) -> subprocess.Popen:
        """A long-running tool (verifiable consumer, copier) writing its JSON lines to `out`."""
        return subprocess.Popen(tool_command(tool, *args), stdout=out, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, preexec_fn=partial(die_with_parent, os.getpid()))
                                # (a failed test's tools end with its process, not hours later)


def json_lines(text: str) -> list[dict]:
    """The JSON events the verifiable tools print, one per line; a last line without its newline is
    still being written (a tool's log read while it runs) and is left for the next read."""
    complete = text[:text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.startswith("{")]
