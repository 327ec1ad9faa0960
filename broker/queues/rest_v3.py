"""Confluent REST Proxy v3's produce endpoint, `POST /v3/clusters/{cluster_id}/topics/
{topic}/records`, so HTTP clients written for it can produce to raftka: one record a
request (the non-streaming form), its key and value given as BINARY (base64), STRING or
JSON data (JSON when the type is left out), headers as base64 values. Answered with a
delivery report, or REST Proxy's error document (`error_code`, `message`) whose code is
the HTTP status."""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.broker.http_endpoint import HttpResponse
from raftka.broker.queues.remote import produce_routed
from raftka.protocol.batch_builder import build_batch

if TYPE_CHECKING:
    from raftka.broker.console.calls import Caller

PATH = re.compile(r"/v3/clusters/([^/]+)/topics/([^/]+)/records")
TEMPLATE = "/v3/clusters/{cluster_id}/topics/{topic}/records"
TYPES = ("BINARY", "STRING", "JSON")

#: (key, partitions) -> the partition a record without partition_id goes to.
Partitioner = Callable[[bytes | None, int], int]


class RestError(Exception):
    """A refusal in REST Proxy's form; `status` is also its `error_code`."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def response(self) -> HttpResponse:
        return rest_error(self.status, self.message)


def rest_error(status: HTTPStatus, message: str) -> HttpResponse:
    document = {"error_code": status.value, "message": message}
    return HttpResponse(status, json.dumps(document).encode(), "application/json")


def _data(given: object, what: str) -> tuple[bytes | None, str | None]:
    """(bytes, type) of a key or value object; (None, None) when absent or null."""
    if given is None:
        return None, None
    if not isinstance(given, dict):
        raise RestError(HTTPStatus.BAD_REQUEST, f"{what}: an object with type and data")
    kind = given.get("type", "JSON")
    if kind not in TYPES:
        raise RestError(
            HTTPStatus.BAD_REQUEST, f"{what}.type: {kind!r} is not one of {', '.join(TYPES)}"
        )
    data = given.get("data")
    if data is None:
        return None, kind
    if kind == "JSON":
        return json.dumps(data, separators=(",", ":")).encode(), kind
    if not isinstance(data, str):
        raise RestError(HTTPStatus.BAD_REQUEST, f"{what}.data: a {kind} datum is a string")
    if kind == "STRING":
        return data.encode(), kind
    try:
        return base64.b64decode(data, validate=True), kind
    except binascii.Error:
        raise RestError(HTTPStatus.BAD_REQUEST, f"{what}.data is not base64") from None


def _headers(given: object) -> list[tuple[str, bytes | None]]:
    if given is None:
        return []
    if not isinstance(given, list):
        raise RestError(HTTPStatus.BAD_REQUEST, "headers: a list of name and value objects")
    found: list[tuple[str, bytes | None]] = []
    for header in given:
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise RestError(HTTPStatus.BAD_REQUEST, "a header has a name and a base64 value")
        value = header.get("value")
        try:
            found.append(
                (header["name"], None if value is None else base64.b64decode(value, validate=True))
            )
        except (binascii.Error, TypeError, ValueError):
            raise RestError(HTTPStatus.BAD_REQUEST, "a header's value is base64") from None
    return found


def _size(datum: bytes | None, kind: str | None) -> dict[str, Any] | None:
    return None if kind is None else {"type": kind, "size": len(datum or b"")}


async def produce_record(
    caller: Caller, cluster_id: str, topic: str, raw: bytes, partitioner: Partitioner
) -> HttpResponse:
    """Produce one record as REST Proxy v3 does (acks=all); RestError for a refusal."""
    services = caller.services
    if cluster_id != services.identity.cluster_id:
        raise RestError(HTTPStatus.NOT_FOUND, f"Cluster {cluster_id} cannot be found.")
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError):
        raise RestError(HTTPStatus.BAD_REQUEST, "The request body is not JSON.") from None
    if not isinstance(body, dict):
        raise RestError(HTTPStatus.BAD_REQUEST, "The request body is not a JSON object.")
    key, key_type = _data(body.get("key"), "key")
    value, value_type = _data(body.get("value"), "value")
    headers = _headers(body.get("headers"))
    metadata = await caller.metadata([topic])
    (found,) = metadata.topics
    if found.error_code == ErrorCode.topic_authorization_failed:
        raise RestError(HTTPStatus.FORBIDDEN, f"Not authorized to access topics: [{topic}]")
    if found.error_code != ErrorCode.none:
        raise RestError(HTTPStatus.NOT_FOUND, f"This server does not host this topic: {topic}")
    count = len(found.partitions)
    partition = body.get("partition_id")
    if partition is None:
        partition = partitioner(key, count)
    elif type(partition) is not int or not 0 <= partition < count:
        raise RestError(
            HTTPStatus.NOT_FOUND, f"This server does not host this topic-partition: {partition}"
        )
    now_ms = services.clock.wall_ms()
    batch = build_batch([(key, value)], now_ms, headers=[headers])
    # At the partition's leader, whichever broker leads it.
    error, message, base_offset = (await produce_routed(caller, topic, [(partition, batch)]))[
        partition
    ]
    if error == ErrorCode.topic_authorization_failed:
        raise RestError(HTTPStatus.FORBIDDEN, f"Not authorized to access topics: [{topic}]")
    if error != ErrorCode.none:
        name = ErrorCode(error).name
        raise RestError(HTTPStatus.INTERNAL_SERVER_ERROR, f"{name}: {message or ''}")
    stamp = datetime.datetime.fromtimestamp(now_ms / 1000, datetime.UTC)
    report = {
        "error_code": 200,
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": partition,
        "offset": base_offset,
        "timestamp": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "key": _size(key, key_type),
        "value": _size(value, value_type),
    }
    return HttpResponse(HTTPStatus.OK, json.dumps(report).encode(), "application/json")
