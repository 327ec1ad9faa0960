"""The queue API's OpenAPI 3.1 document, written as data, and the readable page `/docs`
made from it (plain HTML, no external assets)."""

from __future__ import annotations

import html
import json
from typing import Any

Json = dict[str, Any]  # Any: JSON values

_PROBLEM = {"$ref": "#/components/schemas/Problem"}


def _problems(*statuses: int) -> Json:
    return {
        str(status): {
            "description": "a problem document (RFC 9457)",
            "content": {"application/problem+json": {"schema": _PROBLEM}},
        }
        for status in statuses
    }


def _json(schema: Json, description: str) -> Json:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "the queue (a topic)",
    "schema": {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"},
}
_ID_PROPERTIES: Json = {
    "ids": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 500},
    "id": {"type": "string"},
}
_IDS = {"type": "object", "properties": _ID_PROPERTIES}
_MESSAGE = {
    "type": "object",
    "properties": {
        "value": {"type": "string", "description": "the content, as text (UTF-8)"},
        "value_base64": {"type": "string", "description": "the content, base64-encoded"},
        "key": {"type": "string"},
        "partition": {"type": "integer"},
        "priority": {"type": "integer", "description": "lower is sooner (priority queues)"},
        "delay_ms": {"type": "integer", "minimum": 0},
        "deliver_at_ms": {"type": "integer", "minimum": 0, "description": "epoch ms"},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

_REST_DATA = {
    "type": "object",
    "properties": {"type": {"enum": ["BINARY", "STRING", "JSON"]}, "data": {}},
}
_REST_RECORD = {
    "type": "object",
    "properties": {
        "partition_id": {"type": "integer"},
        "headers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
            },
        },
        "key": _REST_DATA,
        "value": _REST_DATA,
    },
}
_REST_ERROR = {
    "type": "object",
    "properties": {"error_code": {"type": "integer"}, "message": {"type": "string"}},
}


def _settle(what: str, schema: Json = _IDS) -> Json:
    return {
        "summary": what,
        "parameters": [_NAME],
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        "responses": {
            "200": _json({"type": "object"}, "the count settled"),
            **_problems(400, 401, 403, 404, 409),
        },
    }


_NACK = {
    "type": "object",
    "properties": {
        **_ID_PROPERTIES,
        "delay_ms": {
            "type": "integer",
            "minimum": 0,
            "description": "not available again before this many ms from now (kept in the "
            "group's replicated state; a fifo queue without share.delivery.delay.enable "
            "refuses it, 409)",
        },
    },
}
_GROUP = {
    "name": "group",
    "in": "query",
    "required": False,
    "description": "the share group whose state changes (default: the queue's name; also "
    "accepted as `group` in the body)",
    "schema": {"type": "string"},
}
_AT = [
    _NAME,
    {"name": "partition", "in": "path", "required": True, "schema": {"type": "integer"}},
    {"name": "offset", "in": "path", "required": True, "schema": {"type": "integer"}},
    _GROUP,
]
_CHANGED = "the message's `group`, `partition`, `offset` and `state`"


def openapi_document() -> Json:
    """The document of every route the queue API serves (a unit test holds them equal)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "raftka queue API",
            "version": "1",
            "description": "Queues on share groups (KIP-932): a queue is a topic, a dequeue "
            "acquires records for a broker-side member of a share group. With SASL, "
            "authenticate with HTTP Basic as a SASL user; the Kafka port's ACLs apply. Any "
            "broker of a cluster serves the whole queue (every partition's leader).",
        },
        "components": {
            "schemas": {
                "Problem": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string"},
                        "title": {"type": "string"},
                        "status": {"type": "integer"},
                        "detail": {"type": "string"},
                    },
                },
                "Message": _MESSAGE,
            },
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
        },
        "security": [{}, {"basic": []}],
        "paths": {
            "/queues": {
                "get": {
                    "summary": "List the queues the caller may describe",
                    "responses": {
                        "200": _json({"type": "object"}, "the queues"),
                        **_problems(401),
                    },
                }
            },
            "/queues/{name}": {
                "put": {
                    "summary": "Create a queue",
                    "parameters": [_NAME],
                    "requestBody": {
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "partitions": {"type": "integer", "minimum": 1},
                                        "order": {"enum": ["fifo", "priority", "fair"]},
                                        "default_priority": {"type": "integer"},
                                        "delays": {
                                            "type": "boolean",
                                            "description": "a fifo queue honours delays "
                                            "(share.delivery.delay.enable); the other "
                                            "orders always do",
                                        },
                                    },
                                }
                            }
                        }
                    },
                    "responses": {
                        "201": _json({"type": "object"}, "created"),
                        **_problems(400, 401, 403, 409),
                    },
                },
                "delete": {
                    "summary": "Delete a queue and its messages",
                    "parameters": [_NAME],
                    "responses": {
                        "200": _json({"type": "object"}, "deleted"),
                        **_problems(401, 403, 404),
                    },
                },
            },
            "/queues/{name}/messages": {
                "post": {
                    "summary": "Enqueue one message (the body) or many (`messages`)",
                    "parameters": [_NAME],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "oneOf": [
                                        {"$ref": "#/components/schemas/Message"},
                                        {
                                            "type": "object",
                                            "properties": {
                                                "messages": {
                                                    "type": "array",
                                                    "items": {
                                                        "$ref": "#/components/schemas/Message"
                                                    },
                                                    "maxItems": 500,
                                                }
                                            },
                                        },
                                    ]
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": _json({"type": "object"}, "each message's partition and offset"),
                        **_problems(400, 401, 403, 404, 413),
                    },
                }
            },
            "/queues/{name}/dequeue": {
                "post": {
                    "summary": "Acquire up to `max` messages for a share group",
                    "parameters": [_NAME],
                    "requestBody": {
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "group": {
                                            "type": "string",
                                            "description": "default: the queue's name",
                                        },
                                        "max": {"type": "integer", "minimum": 1, "maximum": 500},
                                        "wait_ms": {
                                            "type": "integer",
                                            "minimum": 0,
                                            "maximum": 5000,
                                        },
                                        "ack": {"type": "boolean"},
                                    },
                                }
                            }
                        }
                    },
                    "responses": {
                        "200": _json({"type": "object"}, "the messages, each with its `id`"),
                        **_problems(400, 401, 403, 404),
                    },
                }
            },
            "/queues/{name}/messages/{partition}/{offset}": {
                "patch": {
                    "summary": "Change a queued message's priority in a share group (a "
                    "priority queue; the log is not rewritten; a message in flight takes it "
                    "when released)",
                    "parameters": _AT,
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["priority"],
                                    "properties": {
                                        "priority": {"type": "integer"},
                                        "group": {"type": "string"},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json({"type": "object"}, _CHANGED + " and `priority`"),
                        **_problems(400, 401, 403, 404, 409, 503),
                    },
                },
                "delete": {
                    "summary": "Cancel a queued message in a share group: archived, never "
                    "handed out (409 when in flight or done)",
                    "parameters": _AT,
                    "responses": {
                        "200": _json({"type": "object"}, _CHANGED),
                        **_problems(400, 401, 403, 404, 409, 503),
                    },
                },
            },
            "/queues/{name}/ack": {"post": _settle("Acknowledge: the messages are done")},
            "/queues/{name}/nack": {
                "post": _settle(
                    "Release: the messages are available again (after `delay_ms`, if given)",
                    _NACK,
                )
            },
            "/queues/{name}/reject": {"post": _settle("Reject: the messages are archived")},
            "/queues/{name}/state": {
                "get": {
                    "summary": "A share group's progress through the queue, per partition this "
                    "broker leads: start offset, lag (records not yet acknowledged or archived) "
                    "split into available, delayed and acquired, and those acknowledged and "
                    "archived past the start offset",
                    "parameters": [
                        _NAME,
                        {
                            "name": "group",
                            "in": "query",
                            "schema": {"type": "string"},
                            "description": "default: the queue's name",
                        },
                    ],
                    "responses": {
                        "200": _json({"type": "object"}, "`partitions`, one object each"),
                        **_problems(400, 401, 403, 404, 503),
                    },
                }
            },
            "/v3/clusters/{cluster_id}/topics/{topic}/records": {
                "post": {
                    "summary": "Produce one record as Confluent REST Proxy v3 does",
                    "parameters": [
                        {
                            "name": "cluster_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "topic",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _REST_RECORD}},
                    },
                    "responses": {
                        "200": _json({"type": "object"}, "the delivery report"),
                        **{
                            str(status): _json(_REST_ERROR, "REST Proxy's error document")
                            for status in (400, 401, 403, 404, 413)
                        },
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "security": [{}],
                    "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")},
                }
            },
            "/docs": {
                "get": {
                    "summary": "This document as a page",
                    "security": [{}],
                    "responses": {"200": {"description": "HTML"}},
                }
            },
        },
    }


def docs_page() -> str:
    """The document as one HTML page: each operation, its parameters, body and answers."""
    document = openapi_document()
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>{html.escape(document['info']['title'])}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "pre{background:#f4f4f4;padding:.5em;overflow:auto}code{font-weight:bold}</style>",
        f"</head><body><h1>{html.escape(document['info']['title'])}</h1>",
        f"<p>{html.escape(document['info']['description'])}</p>",
        '<p>The machine-readable document: <a href="/openapi.json">/openapi.json</a>.</p>',
    ]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            parts.append(
                f"<h2><code>{method.upper()} {html.escape(path)}</code></h2>"
                f"<p>{html.escape(operation['summary'])}</p>"
            )
            body = operation.get("requestBody")
            if body is not None:
                schema = body["content"]["application/json"]["schema"]
                parts.append("<h3>Body</h3><pre>" + html.escape(json.dumps(schema, indent=2)))
                parts.append("</pre>")
            answers = ", ".join(
                f"{status} {html.escape(r['description'])}"
                for status, r in operation["responses"].items()
            )
            parts.append(f"<p>Answers: {answers}</p>")
    parts.append("</body></html>")
    return "".join(parts)
