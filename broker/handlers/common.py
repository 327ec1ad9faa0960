"""Small helpers shared by handlers."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import Any

from protocol.api import response_type, schema_module

NO_THROTTLE = datetime.timedelta(0)


def response_schema(context: Any) -> tuple[type[Any], ModuleType]:
    """The response entity for the request being served and its module (nested classes)."""
    entity = response_type(context.api_key, context.api_version)
    return entity, schema_module(entity)
