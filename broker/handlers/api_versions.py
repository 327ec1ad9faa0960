"""ApiVersions: the API keys and version ranges this broker serves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import (
    NO_THROTTLE,
    response_entity,
    response_module,
)
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.api_keys import ApiKey
    from raftka.protocol.messages.requests import ApiVersionsRequest
    from raftka.protocol.messages.responses import ApiVersionsResponse


class VersionRange(Protocol):
    """What ApiVersions reads of a handler: the versions it serves."""

    @property
    def min_version(self) -> int: ...

    @property
    def max_version(self) -> int: ...


def _ranges(handlers: Mapping[ApiKey, VersionRange]) -> list[tuple[int, int, int]]:
    return sorted((key, h.min_version, h.max_version) for key, h in handlers.items())


def unsupported_version_response(
    handlers: Mapping[ApiKey, VersionRange],
) -> ApiVersionsResponseV0:
    """KIP-511: a too-new ApiVersions request is answered in v0 with UNSUPPORTED_VERSION."""
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            build(ApiVersionV0, api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in _ranges(handlers)
        ),
    )


async def handle_api_versions(
    context: RequestContext, request: ApiVersionsRequest
) -> ApiVersionsResponse:
    entity: type[ApiVersionsResponse] = response_entity(context)
    module = response_module(context)
    return build(
        entity,
        error_code=ErrorCode.none,
        api_keys=tuple(
            module.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in _ranges(context.services.handlers)
        ),
        throttle_time=NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )
