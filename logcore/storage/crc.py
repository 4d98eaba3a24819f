"""CRC-32C (Castagnoli), the checksum of Kafka's record batches and of logcore's snapshot files: the crc32c
package's compiled function (SSE 4.2 or ARMv8 instructions where the CPU has them).

Its compiled module is loaded on its own: the package's `__init__` looks its own version up in the metadata of
every installed distribution (importlib.metadata), 80 ms of CPU at each broker start for a string logcore
never reads. If the package's layout changes, the plain import still works."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path


def _compiled():
    package = importlib.util.find_spec("crc32c")
    for location in package.submodule_search_locations or ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(location) / f"_crc32c{suffix}"
            if path.exists():
                spec = importlib.util.spec_from_file_location("crc32c._crc32c", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module.crc32c
    from crc32c import crc32c as packaged
    return packaged


crc32c = _compiled()
