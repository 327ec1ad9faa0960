"""The versions Kafka 4 removed (KIP-896) are not served: each API's lowest served version is
Kafka 4's baseline, read from Kafka's own message definitions (kafka-python ships Apache
Kafka 4's JSON schemas)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from raftka.broker.handlers import HANDLERS

# api key: the request schema's name
REMOVED_BY_KIP_896 = {
    8: "OffsetCommitRequest",
    9: "OffsetFetchRequest",
    19: "CreateTopicsRequest",
    20: "DeleteTopicsRequest",
    32: "DescribeConfigsRequest",
}


def kafka_4_schema(name: str) -> tuple[dict[str, object], str]:
    """(the parsed message definition, its text) of Kafka 4's `name`.json."""
    kafka = pytest.importorskip("kafka")
    path = Path(kafka.__file__).parent / "protocol" / "schemas" / "resources" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"kafka-python has no {path.name}")
    text = path.read_text()
    without_comments = re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE)
    return json.loads(without_comments), text


@pytest.mark.parametrize(("api_key", "name"), sorted(REMOVED_BY_KIP_896.items()))
def test_lowest_served_version_is_kafka_4s_baseline(api_key: int, name: str) -> None:
    schema, text = kafka_4_schema(name)
    assert schema["apiKey"] == api_key
    assert "removed in Apache Kafka 4.0" in text
    lowest, _, highest = str(schema["validVersions"]).partition("-")
    handler = HANDLERS[api_key]
    assert handler.min_version == int(lowest), name
    assert handler.max_version <= int(highest), name
