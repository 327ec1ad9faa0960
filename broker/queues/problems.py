"""Problem documents (RFC 9457): how the queue API refuses a request, as JSON."""

from __future__ import annotations

import json
from http import HTTPStatus

from raftka.broker.http_endpoint import HttpResponse

JSON = "application/json"
PROBLEM_JSON = "application/problem+json"
#: Problem types are documented under this base, one anchor per kind.
TYPE_BASE = "https://raftka.dev/docs/queues#"


class Problem(Exception):
    """A refused request: `status`, a `kind` (the type's anchor) and a line for the caller."""

    def __init__(self, status: HTTPStatus, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail

    def response(self, *headers: tuple[str, str]) -> HttpResponse:
        return problem_response(self.status, self.kind, self.detail, *headers)


def problem_response(
    status: HTTPStatus, kind: str, detail: str, *headers: tuple[str, str]
) -> HttpResponse:
    document = {
        "type": TYPE_BASE + kind,
        "title": status.phrase,
        "status": status.value,
        "detail": detail,
    }
    return HttpResponse(status, json.dumps(document).encode(), PROBLEM_JSON, headers)


def json_response(status: HTTPStatus, document: object) -> HttpResponse:
    return HttpResponse(status, json.dumps(document).encode(), JSON)
