"""Apicurio's v2 REST API (registry/apicurio.py) on a real `binlake schema-registry`: the calls Apicurio's
serdes make, with the bodies and headers its 2.x client sends, over the same subjects and ids as
Confluent's API (driven here by confluent-kafka's SchemaRegistryClient). Apicurio's own Java serdes
against it: tests/reference/test_apicurio.py."""

from __future__ import annotations

import json

import httpx2 as httpx
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from waiting import wait_for

V2 = "/apis/registry/v2"


def record(*fields, name="Order") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": list(fields)})


ID = {"name": "id", "type": "long"}
ONE = record(ID)
TWO = record(ID, {"name": "note", "type": ["null", "string"], "default": None})


def create(registry, artifact: str | None, content: str, if_exists: str = "RETURN_OR_UPDATE", group: str = "default",
           artifact_type: str = "AVRO", **headers) -> httpx.Response:
    """POST /groups/{g}/artifacts as Apicurio's client sends it (DefaultSchemaResolver's auto-register)."""
    sent = {"Content-Type": "application/json", "X-Registry-ArtifactType": artifact_type, **headers}
    if artifact is not None:
        sent["X-Registry-ArtifactId"] = artifact
    return httpx.post(f"{registry.url}{V2}/groups/{group}/artifacts", params={"ifExists": if_exists,
                      "canonical": "false"}, content=content, headers=sent)


def test_an_artifact_created_through_apicurio_is_a_subject_through_confluent(registry):
    made = create(registry, "apic-orders-value", ONE)
    assert made.status_code == 200, made.text
    meta = made.json()
    assert (meta["groupId"], meta["id"], meta["version"], meta["type"]) == ("default", "apic-orders-value", "1", "AVRO")
    assert meta["globalId"] == meta["contentId"]
    confluent = SchemaRegistryClient({"url": registry.url})
    latest = confluent.get_latest_version("apic-orders-value")
    assert (latest.version, latest.schema_id) == (1, meta["contentId"])
    assert json.loads(confluent.get_schema(meta["contentId"]).schema_str) == json.loads(ONE)
    # the same content again is the same version; new content is the next version, checked for compatibility
    assert create(registry, "apic-orders-value", ONE).json() == meta
    second = create(registry, "apic-orders-value", TWO).json()
    assert (second["version"], second["contentId"] > meta["contentId"]) == ("2", True)
    refused = create(registry, "apic-orders-value", record(ID, {"name": "must", "type": "string"}))
    assert (refused.status_code, refused.json()["name"]) == (409, "RuleViolationException")
    assert "apic-orders-value" in refused.json()["message"]
    # RETURN answers the latest version whatever the content; FAIL refuses an existing artifact
    assert create(registry, "apic-orders-value", ONE, "RETURN").json()["version"] == "2"
    failed = create(registry, "apic-orders-value", ONE, "FAIL")
    assert (failed.status_code, failed.json()["name"]) == (409, "ArtifactAlreadyExistsException")


def test_a_schema_registered_through_confluent_is_read_by_apicurio_ids_and_coordinates(registry):
    confluent = SchemaRegistryClient({"url": registry.url})
    schema_id = confluent.register_schema("conf-orders-value", Schema(ONE, "AVRO"))
    base = f"{registry.url}{V2}"
    for kind in ("globalIds", "contentIds"):
        content = httpx.get(f"{base}/ids/{kind}/{schema_id}")
        assert (content.status_code, content.headers["content-type"].split(";")[0]) == (200, "application/json")
        assert json.loads(content.text) == json.loads(ONE)
        assert httpx.get(f"{base}/ids/{kind}/{schema_id}/references").json() == []
    meta = httpx.get(f"{base}/groups/default/artifacts/conf-orders-value/meta").json()
    assert (meta["version"], meta["globalId"], meta["contentId"]) == ("1", schema_id, schema_id)
    # lookup by content (the resolver's path when it neither registers nor takes the latest)
    found = httpx.post(f"{base}/groups/default/artifacts/conf-orders-value/meta", params={"canonical": "true"},
                       content=json.dumps(json.loads(ONE), indent=2), headers={"Content-Type": "application/json"})
    assert (found.status_code, found.json()["contentId"]) == (200, schema_id)
    extended = httpx.post(f"{base}/groups/default/artifacts/conf-orders-value/meta", json={"content": ONE},
                          headers={"Content-Type": "application/vnd.get.extended+json"})  # (3.x's v2 client)
    assert (extended.status_code, extended.json()["version"]) == (200, "1")
    assert json.loads(httpx.get(f"{base}/groups/default/artifacts/conf-orders-value").text) == json.loads(ONE)
    assert json.loads(httpx.get(f"{base}/groups/default/artifacts/conf-orders-value/versions/1").text) == \
        json.loads(ONE)
    listed = httpx.get(f"{base}/groups/default/artifacts/conf-orders-value/versions").json()
    assert (listed["count"], [v["version"] for v in listed["versions"]]) == (1, ["1"])


def test_references_cross_both_apis(registry):
    confluent = SchemaRegistryClient({"url": registry.url})
    confluent.register_schema("ref-money", Schema(record({"name": "cents", "type": "long"}, name="Money"), "AVRO"))
    made = httpx.post(f"{registry.url}{V2}/groups/default/artifacts", params={"ifExists": "RETURN_OR_UPDATE"},
                      headers={"Content-Type": "application/create.extended+json", "X-Registry-ArtifactType": "AVRO",
                               "X-Registry-ArtifactId": "ref-invoice-value"},
                      json={"content": record({"name": "total", "type": "shop.Money"}, name="Invoice"),
                            "references": [{"groupId": "default", "artifactId": "ref-money", "version": "1",
                                            "name": "shop.Money"}]})
    assert made.status_code == 200, made.text
    expected = [{"groupId": "default", "artifactId": "ref-money", "version": "1", "name": "shop.Money"}]
    assert made.json()["references"] == expected
    assert httpx.get(f"{registry.url}{V2}/ids/contentIds/{made.json()['contentId']}/references").json() == expected
    refs = confluent.get_latest_version("ref-invoice-value").schema.references
    assert [(r.name, r.subject, r.version) for r in refs] == [("shop.Money", "ref-money", 1)]


def test_refusals_name_what_is_not_served(registry):
    unknown = httpx.get(f"{registry.url}{V2}/ids/contentIds/987654")
    assert (unknown.status_code, unknown.json()["name"]) == (404, "ContentNotFoundException")
    missing = httpx.get(f"{registry.url}{V2}/groups/default/artifacts/no-such-artifact/meta")
    assert (missing.status_code, missing.json()["name"]) == (404, "ArtifactNotFoundException")
    other_group = create(registry, "x-value", ONE, group="payments")
    assert other_group.status_code == 400 and "'payments' is not served" in other_group.json()["message"]
    no_type = httpx.post(f"{registry.url}{V2}/groups/default/artifacts", content=ONE,
                         headers={"Content-Type": "application/json", "X-Registry-ArtifactId": "x-value"})
    assert no_type.status_code == 400 and "X-Registry-ArtifactType" in no_type.json()["message"]
    versioned = create(registry, "x-value", ONE, **{"X-Registry-Version": "7"})
    assert versioned.status_code == 400 and "X-Registry-Version" in versioned.json()["message"]
    bad = create(registry, "x-value", "{not json")
    assert (bad.status_code, bad.json()["name"]) == (422, "InvalidArtifactException")


def test_a_follower_forwards_an_apicurio_create_with_its_headers(registry_factory):
    leader = registry_factory("leader")
    SchemaRegistryClient({"url": leader.url}).register_schema("fwd-first", Schema(ONE, "AVRO"))  # (elected)
    follower = registry_factory("follower", "--no-leader-eligibility")
    # until the follower has joined the election it answers 500 "Unknown leader", and clients retry (Apicurio's
    # resolver retries 3 times by default); the create is idempotent under RETURN_OR_UPDATE
    wait_for(lambda: create(follower, "fwd-orders-value", ONE).status_code != 500, "the follower to know the leader")
    made = create(follower, "fwd-orders-value", ONE)
    assert made.status_code == 200, made.text
    assert (made.json()["id"], made.json()["version"]) == ("fwd-orders-value", "1")
    assert SchemaRegistryClient({"url": leader.url}).get_latest_version("fwd-orders-value").version == 1
