"""Response frames whose record bytes stay in files: encoded pieces spliced with file ranges.

A Fetch handler puts a placeholder (a unique marker) in a `records` field instead of the
bytes; `encode_spliced_response` encodes the response with kio, then cuts the frame at each
marker and replaces the marker and its length prefix with the range's real length prefix and
the `FileRange` itself. The connection writes bytes pieces with `send` and ranges with
`os.sendfile`, so record bytes never pass through Python. The size prefix counts the ranges.
"""

from __future__ import annotations

import os
import struct
from dataclasses import replace
from typing import Any

from raftka.protocol.api import encode_response
from raftka.protocol.batch_builder import encode_uvarint

_SIZE = struct.Struct(">i")
_MARKER_RANDOM_BYTES = 12


class FileRange:
    """`length` bytes at `position` of an open file; the range owns (and closes) `fd`.

    The descriptor is a duplicate taken when the range was decided, so deleting or renaming
    the segment file afterwards does not change what the range reads.
    """

    __slots__ = ("fd", "position", "length")

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd = fd
        self.position = position
        self.length = length

    def read(self) -> bytes:
        """The range's bytes; OSError if the file no longer holds all of them."""
        parts = []
        got = 0
        while got < self.length:
            more = os.pread(self.fd, self.length - got, self.position + got)
            if not more:
                raise OSError(
                    f"file range at {self.position} of {self.length} bytes: the file ends"
                    f" after {got} of them"
                )
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        # A frame dropped unsent (its connection closed first) still releases its files.
        self.close()


#: A response frame: bytes pieces (the first begins with the size prefix) and file ranges.
Pieces = list[bytes | FileRange]


class Splices:
    """The file ranges one response refers to, by the placeholder bytes standing for them."""

    def __init__(self) -> None:
        self._nonce = b""  # drawn on first use: most small fetches have no ranges
        self.ranges: dict[bytes, FileRange] = {}

    def placeholder(self, file_range: FileRange) -> bytes:
        """Bytes to put in a `records` field; `encode_spliced_response` swaps them out."""
        if not self._nonce:
            self._nonce = os.urandom(_MARKER_RANDOM_BYTES)
        marker = self._nonce + len(self.ranges).to_bytes(4, "big")
        self.ranges[marker] = file_range
        return marker

    def close(self) -> None:
        for file_range in self.ranges.values():
            file_range.close()


def _length_prefix(length: int, flexible: bool) -> bytes:
    """Kafka's length of a non-null bytes field: compact (uvarint length + 1) or int32."""
    return encode_uvarint(length + 1) if flexible else _SIZE.pack(length)


def encode_spliced_response(correlation_id: int, response: Any, splices: Splices) -> Pieces:
    """The response frame with each placeholder replaced by its file range.

    The frame reads byte for byte as `encode_response` would with the ranges' bytes in place
    of the placeholders. A placeholder not found exactly once right after its length prefix
    (record bytes that happen to contain it) is replaced by the range's bytes, read now.
    """
    frame = encode_response(correlation_id, response)
    if not splices.ranges:
        return [frame]
    flexible = bool(getattr(response, "__flexible__", False))
    cuts: list[tuple[int, int, FileRange]] = []  # (start of prefix, end of marker, range)
    inline: dict[bytes, FileRange] = {}
    for marker, file_range in splices.ranges.items():
        prefix = _length_prefix(len(marker), flexible)
        at = frame.find(marker)
        if (
            at < len(prefix)
            or frame[at - len(prefix) : at] != prefix
            or frame.find(marker, at + 1) >= 0
        ):
            inline[marker] = file_range
            continue
        cuts.append((at - len(prefix), at + len(marker), file_range))
    if inline:
        return _encode_inline(correlation_id, response, splices)
    cuts.sort(key=lambda cut: cut[0])
    pieces: Pieces = []
    previous = 0
    size = len(frame) - 4
    for start, end, file_range in cuts:
        prefix = _length_prefix(file_range.length, flexible)
        pieces.append(frame[previous:start] + prefix)
        pieces.append(file_range)
        size += len(prefix) + file_range.length - (end - start)
        previous = end
    tail = frame[previous:]
    if tail:
        pieces.append(tail)
    pieces[0] = _SIZE.pack(size) + pieces[0][4:]  # type: ignore[index]
    return pieces


def _encode_inline(correlation_id: int, response: Any, splices: Splices) -> Pieces:
    """The plain frame with every placeholder's range read into the response (placeholders
    stand only in Fetch partitions' `records`)."""
    by_marker = {marker: file_range.read() for marker, file_range in splices.ranges.items()}
    splices.close()
    topics = []
    for topic in response.responses:
        partitions = tuple(
            replace(p, records=by_marker[p.records]) if p.records in by_marker else p
            for p in topic.partitions
        )
        topics.append(replace(topic, partitions=partitions))
    return [encode_response(correlation_id, replace(response, responses=tuple(topics)))]


def frame_bytes(pieces: Pieces) -> bytes:
    """The frame the pieces stand for, ranges read (for tests and the fallback path)."""
    return b"".join(p if isinstance(p, bytes) else p.read() for p in pieces)


class SplicedResponse:
    """A handler's response whose placeholders stand for `splices`' file ranges."""

    __slots__ = ("response", "splices")

    def __init__(self, response: Any, splices: Splices) -> None:
        self.response = response
        self.splices = splices

    def encode(self, correlation_id: int) -> Pieces:
        return encode_spliced_response(correlation_id, self.response, self.splices)
