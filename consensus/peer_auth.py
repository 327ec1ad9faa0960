"""Mutual challenge-response authentication of a broker-to-broker connection.

Every broker of a cluster holds the same secret (`raft.auth.secret`). Before any Raft
message or forwarded request is accepted on a connection -- or sent on it -- both ends
prove they hold it:

    both ends  -> AUTH_HELLO = magic:4s version:u16 node_id:i32 nonce:32s
    both ends  -> AUTH_PROOF = proof:32s
    proof      = HMAC-SHA256(secret, LABEL role cluster_id prover verifier
                             dialer_nonce listener_nonce)

Each message is framed like the codec's frames (length:u32 kind:u8 body) with kinds of its
own, so a broker without a secret recognises one and says so. Each end sends its AUTH_HELLO
at once, its AUTH_PROOF after reading the other's AUTH_HELLO, and accepts the connection once
the other's proof checks out. Fresh nonces from both ends make an old proof worthless; the
role ("dialer"/"listener") and both node ids inside the HMAC mean a proof cannot be reflected
back to its sender nor reused by another node id; the cluster id keeps clusters that happen
to share a secret apart. A proof is compared in constant time.

What this gives: a process without the secret cannot join, vote, append or forward, and a
broker never sends its Raft traffic to one. What it does not give: confidentiality or
integrity of the traffic after the handshake -- someone on the network path can read it and
could tamper with it. Keep Raft traffic on a private network.

Reads take exactly the bytes a handshake message has, so nothing after the handshake is
consumed here, and a malformed or oversized message ends the handshake at once.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from raftka.consensus.codec import CodecError, FrameKind, Hello, decode_frame
from raftka.consensus.types import NodeId

MAGIC = b"RFTA"
VERSION = 1
NONCE_BYTES = 32
PROOF_BYTES = 32
# Shorter secrets would be guessable offline from one captured proof.
SECRET_CHARS_MIN = 16
_LABEL = b"raftka peer auth v1\x00"

_HEADER = struct.Struct(">IB")
_HELLO = struct.Struct(f">4sHi{NONCE_BYTES}s")
# A plain (unauthenticated) codec HELLO is this small; anything larger is not one.
_PLAIN_HELLO_BYTES_MAX = 64


class AuthKind(enum.IntEnum):
    """Frame kinds of the handshake, beside the codec's FrameKind values."""

    AUTH_HELLO = 16
    AUTH_PROOF = 17


class Role(enum.Enum):
    DIALER = "dialer"
    LISTENER = "listener"

    @property
    def other(self) -> Role:
        return Role.LISTENER if self is Role.DIALER else Role.DIALER


class Refusal(enum.Enum):
    """Why a handshake failed; the transport logs each at most once in a while per peer."""

    NO_SECRET = "no-secret"
    WRONG_SECRET = "wrong-secret"
    UNKNOWN_NODE = "unknown-node"
    WRONG_NODE = "wrong-node"
    MALFORMED = "malformed"
    CLOSED = "closed"
    TIMEOUT = "timeout"


class PeerAuthError(Exception):
    """The peer did not authenticate. `reason` says why, `claimed_node_id` is the node id
    it claimed (None if it named none); the message says what to check."""

    def __init__(self, reason: Refusal, message: str, claimed_node_id: NodeId | None) -> None:
        super().__init__(message)
        self.reason = reason
        self.claimed_node_id = claimed_node_id


@dataclass(frozen=True, slots=True)
class PeerAuth:
    """What a node proves and accepts: `secrets[0]` proves this node's identity; a proof
    made with any of `secrets` is accepted (so a secret can be replaced by a rolling
    restart). `cluster_id` binds every proof to this cluster."""

    secrets: tuple[bytes, ...]
    cluster_id: str

    def __post_init__(self) -> None:
        if not self.secrets:
            raise ValueError("PeerAuth needs at least one secret")

    def proof(
        self,
        secret: bytes,
        role: Role,
        prover: NodeId,
        verifier: NodeId,
        dialer_nonce: bytes,
        listener_nonce: bytes,
    ) -> bytes:
        transcript = b"".join(
            (
                _LABEL,
                role.value.encode(),
                b"\x00",
                self.cluster_id.encode(),
                b"\x00",
                struct.pack(">ii", prover, verifier),
                dialer_nonce,
                listener_nonce,
            )
        )
        return hmac.new(secret, transcript, hashlib.sha256).digest()

    def verify(
        self,
        proof: bytes,
        role: Role,
        prover: NodeId,
        verifier: NodeId,
        dialer_nonce: bytes,
        listener_nonce: bytes,
    ) -> bool:
        ok = False
        for secret in self.secrets:  # every secret is tried, so timing says nothing
            expected = self.proof(secret, role, prover, verifier, dialer_nonce, listener_nonce)
            ok |= hmac.compare_digest(expected, proof)
        return ok


def load_secrets(secret: str | None, secret_file: str | None) -> tuple[bytes, ...] | None:
    """The accepted secrets from `raft.auth.secret` (comma-separated) or the file named by
    `raft.auth.secret.file` (one per line; blank lines and surrounding whitespace ignored);
    None when neither is set. Raises ValueError naming the config when both are set, the file
    cannot be read or holds no secret, or a secret is shorter than SECRET_CHARS_MIN."""
    if secret and secret_file:
        raise ValueError(
            "raft.auth.secret and raft.auth.secret.file are both set: set only one of them"
        )
    if secret_file:
        try:
            text = Path(secret_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"raft.auth.secret.file: cannot read {secret_file}: {exc}") from None
        source, items = f"raft.auth.secret.file ({secret_file})", text.splitlines()
    elif secret:
        source, items = "raft.auth.secret", secret.split(",")
    else:
        return None
    found = tuple(item.strip() for item in items if item.strip())
    if not found:
        raise ValueError(f"{source} holds no secret")
    for item in found:
        if len(item) < SECRET_CHARS_MIN:
            raise ValueError(
                f"{source}: a secret of {len(item)} characters is too short to resist guessing;"
                f" use at least {SECRET_CHARS_MIN} random characters (e.g. openssl rand -hex 32)"
            )
    return tuple(item.encode() for item in found)


async def _receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes | None:
    """`size` bytes, never more; None when the peer closes first."""
    chunks = bytearray()
    while len(chunks) < size:
        chunk = await stream.receive_some(size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def _frame(kind: AuthKind, body: bytes) -> bytes:
    return _HEADER.pack(len(body) + 1, kind) + body


class _Handshake:
    def __init__(
        self,
        stream: trio.abc.Stream,
        auth: PeerAuth,
        role: Role,
        node_id: NodeId,
        accept_peer: Callable[[NodeId], str | None],
        peer_label: str,
    ) -> None:
        self.stream = stream
        self.accept_peer = accept_peer
        self.auth = auth
        self.role = role
        self.node_id = node_id
        self.peer_label = peer_label
        self.claimed: NodeId | None = None

    def fail(self, reason: Refusal, what: str) -> PeerAuthError:
        claimed = "" if self.claimed is None else f" (claiming node {self.claimed})"
        return PeerAuthError(reason, f"{self.peer_label}{claimed} {what}", self.claimed)

    async def read(self, kind: AuthKind, body_bytes: int) -> bytes:
        header = await _receive_exactly(self.stream, _HEADER.size)
        if header is None:
            raise self.closed()
        length, got_kind = _HEADER.unpack(header)
        if got_kind == FrameKind.HELLO and 1 < length <= _PLAIN_HELLO_BYTES_MAX:
            body = await _receive_exactly(self.stream, length - 1)
            plain = _decode_plain_hello(header[4:] + body) if body is not None else None
            if plain is not None:
                self.claimed = plain.node_id
                raise self.fail(
                    Refusal.NO_SECRET,
                    "sent raft traffic without authenticating: it has no raft.auth.secret;"
                    " set the same raft.auth.secret on every broker",
                )
        if got_kind != kind or length != body_bytes + 1:
            raise self.fail(
                Refusal.MALFORMED,
                f"sent bytes that are not the raft authentication handshake (frame kind"
                f" {got_kind}, length {length}; expected {kind.name}): not a raftka broker,"
                " or one of another version",
            )
        body = await _receive_exactly(self.stream, body_bytes)
        if body is None:
            raise self.closed()
        return body

    def closed(self) -> PeerAuthError:
        return self.fail(
            Refusal.CLOSED,
            "closed the connection during the raft authentication handshake: check that it"
            " has the same raft.auth.secret as this broker (its log says why)",
        )


def _decode_plain_hello(body: bytes) -> Hello | None:
    try:
        frame = decode_frame(body)
    except CodecError:
        return None
    return frame if isinstance(frame, Hello) else None


async def authenticate(
    stream: trio.abc.Stream,
    auth: PeerAuth,
    role: Role,
    node_id: NodeId,
    accept_peer: Callable[[NodeId], str | None],
    peer_label: str,
    timeout_s: float,
) -> NodeId:
    """Run the handshake on a fresh connection and return the node id the peer proved.

    `accept_peer(claimed_id)` returns None to go on, or the reason the claimed id is refused
    (the dialer refuses any id but the one it dialled, the listener ids that are not its
    peers); no proof is sent to a refused id. `peer_label` names the peer in errors (e.g.
    "node 2 at 10.0.0.2:9093"). Raises PeerAuthError when the peer does not prove the
    secret in `timeout_s` or sends anything else; the caller then closes the connection."""
    handshake = _Handshake(stream, auth, role, node_id, accept_peer, peer_label)
    with trio.move_on_after(timeout_s):
        try:
            return await _run(handshake)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            raise handshake.closed() from None
    raise handshake.fail(
        Refusal.TIMEOUT,
        f"did not finish the raft authentication handshake within {timeout_s:g} s",
    )


async def _run(h: _Handshake) -> NodeId:
    nonce = secrets.token_bytes(NONCE_BYTES)
    await h.stream.send_all(
        _frame(AuthKind.AUTH_HELLO, _HELLO.pack(MAGIC, VERSION, h.node_id, nonce))
    )
    magic, version, claimed, peer_nonce = _HELLO.unpack(
        await h.read(AuthKind.AUTH_HELLO, _HELLO.size)
    )
    peer_id: NodeId = int(claimed)
    if magic != MAGIC or version != VERSION:
        raise h.fail(
            Refusal.MALFORMED,
            f"speaks raft authentication {magic!r} version {version}, not {MAGIC!r} version"
            f" {VERSION}: run the same raftka version on every broker",
        )
    h.claimed = peer_id
    why = h.accept_peer(peer_id)
    if why is not None:
        raise h.fail(Refusal.WRONG_NODE if h.role is Role.DIALER else Refusal.UNKNOWN_NODE, why)
    if hmac.compare_digest(peer_nonce, nonce):
        raise h.fail(Refusal.MALFORMED, "echoed this broker's own nonce back")
    dialer_nonce, listener_nonce = (
        (nonce, peer_nonce) if h.role is Role.DIALER else (peer_nonce, nonce)
    )
    mine = h.auth.proof(h.auth.secrets[0], h.role, h.node_id, peer_id, dialer_nonce, listener_nonce)
    await h.stream.send_all(_frame(AuthKind.AUTH_PROOF, mine))
    theirs = await h.read(AuthKind.AUTH_PROOF, PROOF_BYTES)
    if not h.auth.verify(theirs, h.role.other, peer_id, h.node_id, dialer_nonce, listener_nonce):
        raise h.fail(
            Refusal.WRONG_SECRET,
            "did not prove this cluster's secret: its raft.auth.secret differs from this"
            " broker's (every broker of a cluster must share one)",
        )
    return peer_id


__all__ = [
    "AuthKind",
    "PeerAuth",
    "PeerAuthError",
    "Refusal",
    "Role",
    "authenticate",
    "load_secrets",
]
