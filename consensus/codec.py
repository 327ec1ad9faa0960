"""Binary encoding of broker-to-broker frames: Raft messages and forwarded requests.

Wire format (all integers big-endian):

    frame   = length:u32 kind:u8 body          (length counts kind + body)
    HELLO   = magic:4s version:u16 node_id:i32
    MESSAGES= count:u32 message*
    message = type:u8 flags:u8 from:i32 to:i32 term:i64 prev_offset:i64 prev_epoch:i32
              high_watermark:i64 match_end:i64 hint_offset:i64 hint_epoch:i32
              last_offset:i64 last_epoch:i32 group_len:u16 entry_count:u32
              group:utf8 entry*                        (group = the Raft group id)
    entry   = base_offset:i64 last_offset:i64 epoch:i32 kind:u8 payload_len:u32 payload
    (a SNAPSHOT message continues after its entries with
              voter_count:u16 voter:i32* data_len:u32 data learner_count:u16 learner:i32*;
     a message with the LOG_START flag ends with log_start_offset:i64)
    FORWARD_REQUEST  = request_id:u64 rpc_len:u16 rpc:utf8 payload_len:u32 payload
    FORWARD_RESPONSE = request_id:u64 error_code:i16 payload_len:u32 payload

Payloads are Kafka record batches of up to ~1 MiB. Encoding returns a list of parts in which
large payloads are the caller's own bytes objects (written as they are, never joined);
decoding copies each payload exactly once, out of the receive buffer. Anything malformed
raises `CodecError`; the receiver then closes the connection.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from raftka.consensus.types import Entry, EntryKind, Message, MessageType, NodeId

MAGIC = b"RFTK"
VERSION = 1
# A frame never exceeds this (the sender cuts message frames well below it).
MAX_FRAME_BYTES = 128 << 20
# Payloads at least this large travel as their own part instead of being copied into a join.
LARGE_PAYLOAD_BYTES = 32 << 10

_LEN = struct.Struct(">I")
_KIND = struct.Struct(">B")
_HELLO = struct.Struct(">Hi")  # after the 4-byte MAGIC
_COUNT = struct.Struct(">I")
_MESSAGE = struct.Struct(">BBiiqqiqqqiqiHI")
_ENTRY = struct.Struct(">qqiBI")
_FORWARD_REQUEST = struct.Struct(">QH")
_FORWARD_RESPONSE = struct.Struct(">QhI")
_PAYLOAD_LEN = struct.Struct(">I")
_VOTER_COUNT = struct.Struct(">H")
_VOTER = struct.Struct(">i")

_FLAG_REJECT = 1
_FLAG_FORCE = 2
_FLAG_AT_LEADER_END = 4
_FLAG_LOG_START = 8  # a log_start_offset:i64 ends the message
_KNOWN_FLAGS = _FLAG_REJECT | _FLAG_FORCE | _FLAG_AT_LEADER_END | _FLAG_LOG_START
_LOG_START = struct.Struct(">q")

Buffer = bytes | bytearray | memoryview


class CodecError(Exception):
    """A frame could not be decoded (or a value cannot be encoded)."""


class FrameKind(enum.IntEnum):
    HELLO = 1
    MESSAGES = 2
    FORWARD_REQUEST = 3
    FORWARD_RESPONSE = 4


@dataclass(frozen=True, slots=True)
class Hello:
    """First frame on every connection: who is dialling."""

    node_id: NodeId


@dataclass(frozen=True, slots=True)
class ForwardRequest:
    """A request for the peer's forward handler. `rpc` names what is asked (the broker's
    RPC names); it is not a Raft group."""

    request_id: int
    rpc: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class ForwardResponse:
    request_id: int
    error_code: int
    payload: bytes


Frame = Hello | list[Message] | ForwardRequest | ForwardResponse


# ---------------------------------------------------------------------------- encoding
class _PartsWriter:
    """Collects small pieces into one bytearray; large payloads become parts of their own."""

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray] = []
        self._current = bytearray()
        self.size = 0

    def write(self, piece: bytes) -> None:
        self._current += piece
        self.size += len(piece)

    def write_payload(self, payload: bytes) -> None:
        if len(payload) >= LARGE_PAYLOAD_BYTES:
            if self._current:
                self.parts.append(self._current)
                self._current = bytearray()
            self.parts.append(payload)
            self.size += len(payload)
        else:
            self.write(payload)

    def finish(self) -> list[bytes | bytearray]:
        if self._current:
            self.parts.append(self._current)
        return self.parts


def _frame(
    kind: FrameKind, body_parts: list[bytes | bytearray], body_size: int
) -> list[bytes | bytearray]:
    if body_size + 1 > MAX_FRAME_BYTES:
        raise CodecError(f"frame of {body_size + 1} bytes exceeds {MAX_FRAME_BYTES}")
    header = _LEN.pack(body_size + 1) + _KIND.pack(kind)
    if body_parts and isinstance(body_parts[0], bytearray):
        body_parts[0][0:0] = header  # small first part: prepend instead of a separate write
        return body_parts
    return [header, *body_parts]


def encode_hello(node_id: NodeId) -> bytes:
    body = MAGIC + _HELLO.pack(VERSION, node_id)
    return _LEN.pack(len(body) + 1) + _KIND.pack(FrameKind.HELLO) + body


def _write_message(out: _PartsWriter, m: Message) -> None:
    group = m.group.encode("utf-8")
    if len(group) > 0xFFFF:
        raise CodecError(f"group name of {len(group)} bytes is too long")
    flags = (
        (_FLAG_REJECT if m.reject else 0)
        | (_FLAG_FORCE if m.force else 0)
        | (_FLAG_AT_LEADER_END if m.at_leader_end else 0)
        | (_FLAG_LOG_START if m.log_start_offset >= 0 else 0)
    )
    try:
        out.write(
            _MESSAGE.pack(
                m.type,
                flags,
                m.from_id,
                m.to,
                m.term,
                m.prev_offset,
                m.prev_epoch,
                m.high_watermark,
                m.match_end,
                m.hint_offset,
                m.hint_epoch,
                m.last_offset,
                m.last_epoch,
                len(group),
                len(m.entries),
            )
        )
        out.write(group)
        for e in m.entries:
            out.write(_ENTRY.pack(e.base_offset, e.last_offset, e.epoch, e.kind, len(e.payload)))
            out.write_payload(e.payload)
        if m.type is MessageType.SNAPSHOT:
            voters = sorted(m.snapshot_voters)
            out.write(_VOTER_COUNT.pack(len(voters)))
            for voter in voters:
                out.write(_VOTER.pack(voter))
            out.write(_PAYLOAD_LEN.pack(len(m.snapshot_data)))
            out.write_payload(m.snapshot_data)
            learners = sorted(m.snapshot_learners)
            out.write(_VOTER_COUNT.pack(len(learners)))
            for learner in learners:
                out.write(_VOTER.pack(learner))
        if m.log_start_offset >= 0:
            out.write(_LOG_START.pack(m.log_start_offset))
    except struct.error as exc:
        raise CodecError(f"cannot encode {m.type.name} for {m.group!r}: {exc}") from exc


def encode_messages(messages: Sequence[Message]) -> list[bytes | bytearray]:
    """One MESSAGES frame as parts to be written in order (see module docstring)."""
    out = _PartsWriter()
    out.write(_COUNT.pack(len(messages)))
    for m in messages:
        _write_message(out, m)
    size = out.size
    return _frame(FrameKind.MESSAGES, out.finish(), size)


def encode_forward_request(request_id: int, rpc: str, payload: bytes) -> list[bytes | bytearray]:
    name = rpc.encode("utf-8")
    out = _PartsWriter()
    try:
        out.write(_FORWARD_REQUEST.pack(request_id, len(name)))
        out.write(name)
        out.write(_PAYLOAD_LEN.pack(len(payload)))
    except struct.error as exc:
        raise CodecError(f"cannot encode forward request: {exc}") from exc
    out.write_payload(payload)
    size = out.size
    return _frame(FrameKind.FORWARD_REQUEST, out.finish(), size)


def encode_forward_response(
    request_id: int, error_code: int, payload: bytes
) -> list[bytes | bytearray]:
    out = _PartsWriter()
    try:
        out.write(_FORWARD_RESPONSE.pack(request_id, error_code, len(payload)))
    except struct.error as exc:
        raise CodecError(f"cannot encode forward response: {exc}") from exc
    out.write_payload(payload)
    size = out.size
    return _frame(FrameKind.FORWARD_RESPONSE, out.finish(), size)


def message_size_bytes(m: Message) -> int:
    """Encoded size of `m` without building it (for the transport's byte budget)."""
    size = _MESSAGE.size + len(m.group) + sum(_ENTRY.size + len(e.payload) for e in m.entries)
    if m.type is MessageType.SNAPSHOT:
        size += (
            _VOTER_COUNT.size
            + _VOTER.size * len(m.snapshot_voters)
            + _PAYLOAD_LEN.size
            + len(m.snapshot_data)
            + _VOTER_COUNT.size
            + _VOTER.size * len(m.snapshot_learners)
        )
    if m.log_start_offset >= 0:
        size += _LOG_START.size
    return size


# ---------------------------------------------------------------------------- decoding
def frame_length(header: Buffer) -> int:
    """Length of the frame (kind + body) announced by the 4-byte prefix `header`."""
    (length,) = _LEN.unpack_from(header, 0)
    if length < 1 or length > MAX_FRAME_BYTES:
        raise CodecError(f"frame length {length} outside 1..{MAX_FRAME_BYTES}")
    return int(length)


FRAME_HEADER_BYTES = _LEN.size


class _Reader:
    __slots__ = ("view", "pos")

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.pos = 0

    def unpack(self, st: struct.Struct) -> tuple[int, ...]:
        if self.pos + st.size > len(self.view):
            raise CodecError(f"truncated frame at byte {self.pos}")
        values = st.unpack_from(self.view, self.pos)
        self.pos += st.size
        return values

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.view):
            raise CodecError(f"truncated frame at byte {self.pos} (want {n} bytes)")
        chunk = bytes(self.view[self.pos : self.pos + n])
        self.pos += n
        return chunk

    def text(self, n: int) -> str:
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodecError(f"group or rpc name is not UTF-8: {exc}") from exc

    def finish(self) -> None:
        if self.pos != len(self.view):
            raise CodecError(f"{len(self.view) - self.pos} trailing bytes in frame")


def _read_message(r: _Reader) -> Message:
    (
        type_code,
        flags,
        from_id,
        to,
        term,
        prev_offset,
        prev_epoch,
        high_watermark,
        match_end,
        hint_offset,
        hint_epoch,
        last_offset,
        last_epoch,
        group_len,
        entry_count,
    ) = r.unpack(_MESSAGE)
    try:
        message_type = MessageType(type_code)
    except ValueError:
        raise CodecError(f"unknown message type {type_code}") from None
    if flags & ~_KNOWN_FLAGS:
        raise CodecError(f"unknown message flags {flags:#x}")
    group = r.text(group_len)
    if entry_count * _ENTRY.size > len(r.view) - r.pos:
        raise CodecError(f"entry count {entry_count} exceeds the frame")
    entries = []
    for _ in range(entry_count):
        base, last, epoch, kind_code, payload_len = r.unpack(_ENTRY)
        try:
            kind = EntryKind(kind_code)
        except ValueError:
            raise CodecError(f"unknown entry kind {kind_code}") from None
        if last < base or base < 0:
            raise CodecError(f"bad entry offsets [{base}, {last}]")
        entries.append(Entry(base, last, epoch, r.take(payload_len), kind))
    snapshot_voters: frozenset[NodeId] = frozenset()
    snapshot_data = b""
    snapshot_learners: frozenset[NodeId] = frozenset()
    if message_type is MessageType.SNAPSHOT:
        (voter_count,) = r.unpack(_VOTER_COUNT)
        snapshot_voters = frozenset(r.unpack(_VOTER)[0] for _ in range(voter_count))
        (data_len,) = r.unpack(_PAYLOAD_LEN)
        snapshot_data = r.take(data_len)
        (learner_count,) = r.unpack(_VOTER_COUNT)
        snapshot_learners = frozenset(r.unpack(_VOTER)[0] for _ in range(learner_count))
    log_start_offset = -1
    if flags & _FLAG_LOG_START:
        (log_start_offset,) = r.unpack(_LOG_START)
        if log_start_offset < 0:
            raise CodecError(f"negative log start offset {log_start_offset}")
    return Message(
        group=group,
        type=message_type,
        from_id=from_id,
        to=to,
        term=term,
        prev_offset=prev_offset,
        prev_epoch=prev_epoch,
        entries=tuple(entries),
        high_watermark=high_watermark,
        reject=bool(flags & _FLAG_REJECT),
        match_end=match_end,
        hint_offset=hint_offset,
        hint_epoch=hint_epoch,
        last_offset=last_offset,
        last_epoch=last_epoch,
        force=bool(flags & _FLAG_FORCE),
        at_leader_end=bool(flags & _FLAG_AT_LEADER_END),
        snapshot_voters=snapshot_voters,
        snapshot_data=snapshot_data,
        snapshot_learners=snapshot_learners,
        log_start_offset=log_start_offset,
    )


def decode_frame(body: Buffer) -> Frame:
    """Decode one frame body (kind byte onwards, without the length prefix)."""
    with memoryview(body) as view:
        r = _Reader(view)
        (kind_code,) = r.unpack(_KIND)
        frame: Frame
        if kind_code == FrameKind.HELLO:
            magic = r.take(len(MAGIC))
            version, node_id = r.unpack(_HELLO)
            if magic != MAGIC or version != VERSION:
                raise CodecError(f"bad hello: magic {magic!r} version {version}")
            frame = Hello(node_id)
        elif kind_code == FrameKind.MESSAGES:
            (count,) = r.unpack(_COUNT)
            if count * _MESSAGE.size > len(view) - r.pos:
                raise CodecError(f"message count {count} exceeds the frame")
            frame = [_read_message(r) for _ in range(count)]
        elif kind_code == FrameKind.FORWARD_REQUEST:
            request_id, rpc_len = r.unpack(_FORWARD_REQUEST)
            rpc = r.text(rpc_len)
            (payload_len,) = r.unpack(_PAYLOAD_LEN)
            frame = ForwardRequest(request_id, rpc, r.take(payload_len))
        elif kind_code == FrameKind.FORWARD_RESPONSE:
            request_id, error_code, payload_len = r.unpack(_FORWARD_RESPONSE)
            frame = ForwardResponse(request_id, error_code, r.take(payload_len))
        else:
            raise CodecError(f"unknown frame kind {kind_code}")
        r.finish()
        return frame


def decode_stream(data: Buffer) -> list[Frame]:
    """Decode a byte string holding whole frames back to back (tests, tools)."""
    frames: list[Frame] = []
    with memoryview(data) as view:
        pos = 0
        while pos < len(view):
            if pos + FRAME_HEADER_BYTES > len(view):
                raise CodecError("truncated frame header")
            length = frame_length(view[pos : pos + FRAME_HEADER_BYTES])
            start = pos + FRAME_HEADER_BYTES
            if start + length > len(view):
                raise CodecError("truncated frame")
            frames.append(decode_frame(view[start : start + length]))
            pos = start + length
    return frames


__all__ = [
    "CodecError",
    "ForwardRequest",
    "ForwardResponse",
    "Frame",
    "FrameKind",
    "Hello",
    "MAX_FRAME_BYTES",
    "decode_frame",
    "decode_stream",
    "encode_forward_request",
    "encode_forward_response",
    "encode_hello",
    "encode_messages",
    "frame_length",
    "message_size_bytes",
]
