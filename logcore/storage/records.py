"""Record batches (magic v2) as records: the one module that builds and decodes individual records.

The produce and fetch paths never come here (they only read batch headers, see batch.py); the
coordinators, the log cleaner and dump-log do.
"""

from __future__ import annotations

import datetime
import io

from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch


def encode_batch(records: list[tuple[bytes | None, bytes | None]], timestamp_ms: int) -> bytes:
    """One uncompressed, non-transactional batch of (key, value) records with base offset 0 (the log
    assigns the real one) and one CreateTime timestamp for all of them."""
    timestamp = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    batch = NewRecordBatch(
        producer_id=-1, producer_epoch=-1, base_sequence=-1, attributes=0,
        records=tuple(Record(attributes=0, timestamp=timestamp, offset=i, key=k, value=v, headers=())
                      for i, (k, v) in enumerate(records)),
    )
    buf = io.BytesIO()
    write_new_batch(buf, batch)
    return buf.getvalue()
