"""Kafka request/response framing on top of kio's generated entities.

A request frame (after its 4-byte size prefix) starts with a fixed prefix that every header
version shares: api_key int16, api_version int16, correlation_id int32. That prefix is read
with `struct` so that even a request we cannot decode can be answered or logged by its
correlation id. Everything else is kio, but for the hot APIs' hand-written codecs: Produce
and Fetch requests are decoded by `produce_codec` and `fetch_codec` (the connection calls
them), and `encode_response` writes Fetch responses with `fetch_codec`, from kio entities.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import re
import struct
import sys
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from types import ModuleType
from typing import Any, Final, NamedTuple, TypeVar

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from raftka.protocol.bounds import BoundsError, check_request

API_VERSIONS_KEY = 18
FETCH_KEY = 1

E = TypeVar("E")

_PREFIX: Final = struct.Struct(">hhi")
_PREFIX_BYTES: Final[int] = _PREFIX.size
_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """A frame that cannot be decoded; the connection that sent it is closed."""


class RequestPrefix(NamedTuple):
    """The first fields of every request (a tuple: made per request, it costs least)."""

    api_key: int
    api_version: int
    correlation_id: int


class EncodedResponse:
    """A response that writes its own frame (a hand-written encoder of a hot API) instead
    of a kio entity; `error_code` is its top-level error, as a kio response's would be."""

    __slots__ = ()
    error_code: int = 0

    def encode(self, correlation_id: int) -> bytes:
        """The whole response frame: size prefix, response header, body."""
        raise NotImplementedError


def read_prefix(frame: bytes | memoryview) -> RequestPrefix:
    if len(frame) < _PREFIX_BYTES:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than a request header")
    return _new_prefix(RequestPrefix, _PREFIX.unpack_from(frame, 0))


#: A prefix from its fields without the NamedTuple's Python-level `__new__` (one per request).
_new_prefix: Final = tuple.__new__


@cache
def request_type(api_key: int, api_version: int) -> type[Any] | None:
    """kio's request entity for this key and version, or None if kio does not know it."""
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@cache
def response_type(api_key: int, api_version: int) -> type[Any]:
    return load_response_schema(api_key, api_version)


def schema_module(entity_type: type[Any]) -> ModuleType:
    """The generated module of an entity, which also holds its nested entity classes."""
    return sys.modules[entity_type.__module__]


@cache
def _field_names(entity_type: Any) -> frozenset[str]:
    return frozenset(f.name for f in fields(entity_type))


_VERSION_PART = re.compile(r"v\d+")


@cache
def _any_version_field_names(entity_type: Any) -> frozenset[str]:
    """The fields of every version of the entity: its class of the same name in each
    version's module of the same API (`kio.schema.<api>.v<N>.<kind>`)."""
    parts = entity_type.__module__.split(".")
    names = set(_field_names(entity_type))
    if len(parts) < 4 or not _VERSION_PART.fullmatch(parts[-2]):
        return frozenset(names)  # not a versioned kio entity: its own fields only
    api_package = importlib.import_module(".".join(parts[:-2]))
    for version in pkgutil.iter_modules(api_package.__path__):
        if not _VERSION_PART.fullmatch(version.name):
            continue
        try:
            sibling = importlib.import_module(f"{api_package.__name__}.{version.name}.{parts[-1]}")
        except ImportError:
            continue
        other = getattr(sibling, entity_type.__name__, None)
        if isinstance(other, type):
            names |= _field_names(other)
    return frozenset(names)


def build(entity_type: type[E], **values: object) -> E:
    """Instantiate a kio entity from values meant for any version of it.

    Fields the version does not have are dropped; fields it has but that were not given
    keep their schema defaults. This lets one handler serve a range of versions. A field
    that no version of the entity has is a mistake and raises TypeError.

    Which names to drop is worked out once per entity and set of names given (a call site
    gives the same names each time), so most calls cost the constructor and one lookup.
    """
    key = (entity_type, tuple(values))
    dropped = _DROPPED.get(key)
    if dropped is None:
        dropped = _DROPPED[key] = _dropped_names(entity_type, key[1])
    if not dropped:
        return entity_type(**values)
    return entity_type(**{k: v for k, v in values.items() if k not in dropped})


#: (entity, names given) -> the names its version lacks (see `build`).
_DROPPED: dict[tuple[type, tuple[str, ...]], frozenset[str]] = {}


def _dropped_names(entity_type: type, given: tuple[str, ...]) -> frozenset[str]:
    """The names of `given` that the entity's version lacks; TypeError for a name that no
    version of it has."""
    entity: Any = entity_type  # the caches take a class, which mypy does not see as Hashable
    missing = frozenset(given) - _field_names(entity)
    if missing and (unknown := missing - _any_version_field_names(entity)):
        raise TypeError(
            f"{entity_type.__module__}.{entity_type.__name__} has no field "
            + ", ".join(sorted(unknown))
            + " in any version"
        )
    return missing


def decode_request(frame: bytes | memoryview, prefix: RequestPrefix) -> tuple[Any, Any]:
    """Decode the header and body of a request frame: (header, request entity).

    Raises FrameError for anything kio cannot read (unknown key/version, truncated or
    malformed data, trailing garbage is tolerated as Kafka does).
    """
    req_type = request_type(prefix.api_key, prefix.api_version)
    if req_type is None:
        raise FrameError(f"unknown api key {prefix.api_key} version {prefix.api_version}")
    header_type = RequestHeaderV2 if req_type.__flexible__ else RequestHeaderV1
    try:
        # Before kio: its native reader aborts the process on an absurd array length.
        check_request(frame, req_type)
    except BoundsError as bounds:
        raise FrameError(f"malformed {req_type.__name__} v{prefix.api_version}: {bounds}") from None
    try:
        header, header_size = entity_reader(header_type)(frame, 0)
        body, _ = entity_reader(req_type)(frame, header_size)
    except Exception as exc:  # kio raises several types for malformed input
        raise FrameError(f"cannot decode {req_type.__name__} v{prefix.api_version}: {exc}") from exc
    return header, body


@cache
def _fast_encoder(entity_type: Any) -> Callable[[int, Any], bytes | None] | None:
    """The hand-written encoder of a response type, if one serves it (Fetch v4-v12)."""
    from raftka.protocol import fetch_codec  # it reads frames with this module's FrameError

    if (
        entity_type.__name__ == "FetchResponse"
        and getattr(entity_type, "__api_key__", None) == FETCH_KEY
        and fetch_codec.FIRST_VERSION <= entity_type.__version__ <= fetch_codec.LAST_VERSION
    ):
        return fetch_codec.encode_fetch_response
    return None


def encode_response(correlation_id: int, response: Any) -> bytes:
    """A complete response frame: size prefix, response header (v0 or v1), body."""
    entity: Any = type(response)  # the cache takes a class, which mypy does not see as Hashable
    fast = _fast_encoder(entity)
    if fast is not None:
        encoded = fast(correlation_id, response)
        if encoded is not None:
            return encoded
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header_type = response.__header_schema__
    entity_writer(header_type)(buf, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(buf, response)
    frame = buf.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    del frame
    return buf.getvalue()
