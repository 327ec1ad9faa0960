"""protocol/messages: each API's request and response unions cover exactly the versions
its handler serves."""

import ast
import re
from pathlib import Path

import pytest
from kio.schema.index import api_key_map

import raftka.protocol.messages
from raftka.broker.handlers import HANDLERS
from raftka.protocol.api import request_type

_MEMBER = re.compile(r"kio\.schema\.(\w+)\.v(\d+)\.(request|response)\.\w+")


def _versions(kind: str) -> dict[str, set[int]]:
    """API name -> the versions of it the module's unions name."""
    path = Path(raftka.protocol.messages.__file__).parent / f"{kind}s.py"
    found: dict[str, set[int]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            for api, version, _ in _MEMBER.findall(ast.unparse(node.value)):
                found.setdefault(api, set()).add(int(version))
    return found


@pytest.mark.parametrize("kind", ["request", "response"])
def test_unions_name_the_versions_the_handlers_serve(kind: str) -> None:
    served = {
        api_key_map[key]: set(range(h.min_version, h.max_version + 1))
        for key, h in HANDLERS.items()
    }
    assert _versions(kind) == served


def test_each_served_api_has_kafkas_name() -> None:
    """The names the request metrics label each API with are those of Kafka's schemas (as
    kio's request entities carry them), for every API a handler serves."""
    schemas = {key: request_type(key, h.max_version) for key, h in HANDLERS.items()}
    assert {key: key.kafka_name for key in HANDLERS} == {
        key: entity.__name__.removesuffix("Request") for key, entity in schemas.items() if entity
    }
