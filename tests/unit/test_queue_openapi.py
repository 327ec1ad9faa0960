"""The queue API's OpenAPI document names exactly the routes the API serves, each answered
by a method of QueueApi, and its /docs page shows every one of them."""

from __future__ import annotations

from raftka.broker.queues.api import ROUTES, QueueApi
from raftka.broker.queues.member import MessageId
from raftka.broker.queues.openapi import docs_page, openapi_document


def test_every_route_served_is_documented_and_every_documented_one_served() -> None:
    documented = {
        (method.upper(), path)
        for path, operations in openapi_document()["paths"].items()
        for method in operations
    }
    assert documented == set(ROUTES)
    for name in ROUTES.values():
        assert callable(getattr(QueueApi, name))


def test_the_docs_page_shows_every_operation_without_external_assets() -> None:
    page = docs_page()
    for method, path in ROUTES:
        assert f"{method} {path}" in page
    assert "<script" not in page and "http://" not in page and "https://" not in page


def test_a_message_id_round_trips() -> None:
    found = MessageId("g", "m1", "jobs", 3, 42)
    assert MessageId.decode(found.encode()) == found
