"""Reading a process's Prometheus endpoint the way Prometheus does: over HTTP, parsed with
prometheus-client's own parser."""

from __future__ import annotations

import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def endpoint(log: str) -> str | None:
    """The URL a process logged it serves metrics at ("Prometheus metrics on http://…/metrics")."""
    found = re.search(r"Prometheus metrics on (http://\S+)", log)
    return found.group(1) if found else None


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted (label, value) pairs): value} of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: dict, name: str, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]
