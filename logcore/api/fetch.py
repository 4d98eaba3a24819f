"""Fetch: record bytes straight from segment files, long-polling until min_bytes or max_wait."""

import time

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError
from . import handles


@handles(ApiKey.FETCH, 4, 12)
async def fetch(ctx, request) -> dict:
    replicas = ctx.broker.replicas
    deadline = time.monotonic() + request.max_wait.total_seconds()
    wanted = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    while True:
        responses, total = _read_all(replicas, request)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or remaining <= 0 or not wanted:
            return {"error_code": ErrorCode.none, "session_id": 0, "responses": responses}
        await replicas.wait_for_data(wanted, remaining)


def _read_all(replicas, request) -> tuple[list[dict], int]:
    budget = request.max_bytes
    total = 0
    responses = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = {"partition_index": p.partition, "high_watermark": -1, "last_stable_offset": -1,
                      "log_start_offset": -1, "aborted_transactions": None, "records": b""}
            try:
                limit = min(p.partition_max_bytes, budget)
                got = replicas.read(topic.topic, p.partition, p.fetch_offset, limit, min_one_batch=total == 0)
                result.update(error_code=ErrorCode.none, high_watermark=got.high_watermark,
                              last_stable_offset=got.last_stable_offset, log_start_offset=got.log_start_offset,
                              records=got.records or b"")
                budget -= got.size
                total += got.size
            except BrokerError as exc:
                result["error_code"] = exc.code
            partitions.append(result)
        responses.append({"topic": topic.topic, "partitions": partitions})
    return responses, total
