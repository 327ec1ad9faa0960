"""ApiVersions: the API keys and version ranges this broker serves."""

from __future__ import annotations

from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode

from broker.handlers.common import NO_THROTTLE, response_schema
from protocol.api import build


def _ranges(broker: Any) -> list[tuple[int, int, int]]:
    return sorted((key, h.min_version, h.max_version) for key, h in broker.handlers.items())


def unsupported_version_response(broker: Any) -> Any:
    """KIP-511: a too-new ApiVersions request is answered in v0 with UNSUPPORTED_VERSION."""
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            build(ApiVersionV0, api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in _ranges(broker)
        ),
    )


async def handle_api_versions(context: Any, request: Any) -> Any:
    entity, module = response_schema(context)
    return build(
        entity,
        error_code=ErrorCode.none,
        api_keys=tuple(
            module.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in _ranges(context.broker)
        ),
        throttle_time=NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )
