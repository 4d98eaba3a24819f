"""Kafka's ZooKeeper layout: the paths and the JSON of each znode, so that `zkCli` shows a binlake
cluster as it shows a Kafka one (docs/cluster.md). Pure functions from values to bytes and back."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass

from .view import Node

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"


class LayoutError(ValueError):
    """A znode whose content is not what Kafka's layout puts there."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def encode_broker(node: Node, timestamp_ms: int) -> bytes:
    """A broker's registration, as Kafka writes it (version 5: endpoints, rack, features). Brokers
    read only the endpoints back; the protocol map names each listener after itself."""
    endpoints = node.endpoints or (("PLAINTEXT", node.host, node.port),)
    return _json({"version": 5, "host": node.host, "port": node.port,
                  "endpoints": [f"{name}://{host}:{port}" for name, host, port in endpoints],
                  "listener_security_protocol_map": {name: name for name, _, _ in endpoints},
                  "rack": node.rack, "jmx_port": -1, "features": {}, "timestamp": str(timestamp_ms)})


def decode_broker(broker_id: int, data: bytes) -> Node:
    value = _parse(broker_path(broker_id), data)
    try:
        endpoints = []
        for endpoint in value.get("endpoints") or ():
            name, _, address = endpoint.partition("://")
            host, _, port = address.rpartition(":")
            endpoints.append((name, host, int(port)))
        return Node(broker_id, value["host"], int(value["port"]), value.get("rack"), tuple(endpoints))
    except (KeyError, TypeError, ValueError) as exc:
        raise LayoutError(f"{broker_path(broker_id)} holds no broker registration ({exc!r}): {data[:200]!r}") from None


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _json({"version": 2, "brokerid": broker_id, "timestamp": str(timestamp_ms), "kraftControllerEpoch": -1})


def decode_controller(data: bytes) -> int:
    try:
        return int(_parse(CONTROLLER, data)["brokerid"])
    except (KeyError, TypeError, ValueError) as exc:
        raise LayoutError(f"{CONTROLLER} names no broker ({exc!r}): {data[:200]!r}") from None


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data)
    except ValueError:
        raise LayoutError(f"{CONTROLLER_EPOCH} is not an integer: {data[:200]!r}") from None


@dataclass(frozen=True)
class PartitionState:
    """`/brokers/topics/T/partitions/P/state`: who leads, in which epoch, with which ISR, decided by
    which controller epoch."""
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def encode_partition_state(state: PartitionState) -> bytes:
    return _json({"controller_epoch": state.controller_epoch, "leader": state.leader, "version": 1,
                  "leader_epoch": state.leader_epoch, "isr": list(state.isr)})


def decode_partition_state(path: str, data: bytes) -> PartitionState:
    value = _parse(path, data)
    try:
        return PartitionState(int(value["leader"]), int(value["leader_epoch"]), tuple(int(b) for b in value["isr"]),
                              int(value["controller_epoch"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise LayoutError(f"{path} holds no partition state ({exc!r}): {data[:200]!r}") from None


def _json(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _parse(path: str, data: bytes) -> dict:
    try:
        value = json.loads(data)
    except (ValueError, TypeError):
        raise LayoutError(f"{path} does not hold JSON: {data[:200]!r}") from None
    if not isinstance(value, dict):
        raise LayoutError(f"{path} does not hold a JSON object: {data[:200]!r}")
    return value


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def topic_config_path(topic: str) -> str:
    return f"/config/topics/{topic}"


def encode_topic_assignment(topic_id: str, assignment: dict[int, list[int]],
                            adding: dict[int, list[int]] | None = None,
                            removing: dict[int, list[int]] | None = None) -> bytes:
    """`/brokers/topics/T`: the replicas of each partition, preferred leader first (version 3), and
    of the partitions being reassigned, the replicas being added and removed (KIP-455)."""
    return _json({"version": 3, "topic_id": topic_id,
                  "partitions": {str(p): replicas for p, replicas in sorted(assignment.items())},
                  "adding_replicas": {str(p): r for p, r in sorted((adding or {}).items())},
                  "removing_replicas": {str(p): r for p, r in sorted((removing or {}).items())}})


def decode_reassignments(topic: str, data: bytes) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(adding, removing) replicas of the topic's partitions being reassigned."""
    value = _parse(topic_path(topic), data)
    try:
        return tuple({int(p): [int(b) for b in replicas] for p, replicas in (value.get(key) or {}).items()}
                     for key in ("adding_replicas", "removing_replicas"))
    except (TypeError, ValueError, AttributeError) as exc:
        raise LayoutError(f"{topic_path(topic)} holds no readable reassignment ({exc!r}): {data[:200]!r}") from None


def decode_topic_assignment(topic: str, data: bytes) -> dict[int, list[int]]:
    value = _parse(topic_path(topic), data)
    try:
        return {int(p): [int(b) for b in replicas] for p, replicas in value["partitions"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LayoutError(f"{topic_path(topic)} holds no replica assignment ({exc!r}): {data[:200]!r}") from None


def encode_uuid(value: uuid.UUID) -> str:
    """Kafka's text form of a topic id: URL-safe base64 of its 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def decode_topic_id(topic: str, data: bytes) -> uuid.UUID:
    value = _parse(topic_path(topic), data)
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(value["topic_id"] + "=="))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LayoutError(f"{topic_path(topic)} holds no topic id ({exc!r}): {data[:200]!r}") from None


def decode_reassign_request(data: bytes) -> dict[tuple[str, int], list[int]]:
    """`/admin/reassign_partitions` (written by pre-2.4 tools): {"version": 1, "partitions":
    [{"topic": T, "partition": P, "replicas": [ids]}]}."""
    value = _parse(REASSIGN_PARTITIONS, data)
    try:
        return {(p["topic"], int(p["partition"])): [int(b) for b in p["replicas"]] for p in value["partitions"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise LayoutError(f"{REASSIGN_PARTITIONS} holds no reassignment plan ({exc!r}): {data[:200]!r}") from None


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return _json({"version": 1, "config": dict(configs)})


def decode_topic_config(topic: str, data: bytes) -> dict[str, str]:
    value = _parse(topic_config_path(topic), data)
    configs = value.get("config", {})
    if not isinstance(configs, dict):
        raise LayoutError(f"{topic_config_path(topic)} holds no config object: {data[:200]!r}")
    return {str(k): str(v) for k, v in configs.items()}
