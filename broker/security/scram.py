"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them: the stored
credential (salt, iterations, stored key, server key: never the password) and the server
side of one authentication exchange."""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

#: Kafka's bounds for AlterUserScramCredentials iterations.
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384


class ScramMechanism(enum.IntEnum):
    """The mechanism numbers of Describe/AlterUserScramCredentials (KIP-554)."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def by_name(cls, name: str) -> ScramMechanism | None:
        for mechanism in cls:
            if mechanism.mechanism_name == name:
                return mechanism
        return None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: ScramMechanism
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.hash_name).digest()


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: ScramMechanism, salt: bytes, iterations: int, salted: bytes
) -> ScramCredential:
    """The credential stored for a salted password (what AlterUserScramCredentials sends)."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    server_key = _hmac(mechanism, salted, b"Server Key")
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def make_credential(
    mechanism: ScramMechanism, password: str, iterations: int = ITERATIONS_MIN
) -> ScramCredential:
    salt = os.urandom(32)
    return credential_from_salted(
        mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations)
    )


def password_matches(credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `credential` was made from (for SASL/PLAIN)."""
    salted = salted_password(credential.mechanism, password, credential.salt, credential.iterations)
    derived = credential_from_salted(
        credential.mechanism, credential.salt, credential.iterations, salted
    )
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


def unknown_user_credential(mechanism: ScramMechanism, username: str) -> ScramCredential:
    """A stand-in credential for a user without one: the same salt for the same name each
    time, Kafka's default iteration count, and keys no password matches."""
    salt = hmac.new(b"raftka-unknown-user", username.encode(), "sha256").digest()
    return ScramCredential(mechanism, salt, ITERATIONS_MIN, b"", b"")


class ScramError(Exception):
    """A failed or malformed exchange; the message is safe to send to the client."""


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed SCRAM message attribute {part[:40]!r}")
        out.setdefault(key, value)
    return out


def _username(saslname: str) -> str:
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed SCRAM user name")
    return saslname.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One exchange: `first(client-first)` → server-first, `final(client-final)` →
    server-final. `lookup` gives a user's credential (None: unknown user, which fails at
    the final step exactly as a wrong password does)."""

    def __init__(
        self, mechanism: ScramMechanism, server_nonce: Callable[[], str] | None = None
    ) -> None:
        self.mechanism = mechanism
        # Alphanumeric, as Kafka makes it: some clients mishandle "=" or "/" in a nonce.
        self._server_nonce = server_nonce or (lambda: os.urandom(24).hex())
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._known_user = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def parse_first(self, message: bytes) -> str:
        """Parse client-first; returns the user name whose credential `respond_first` needs."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM client-first message is not UTF-8") from None
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            if flag.startswith("p"):
                raise ScramError("SCRAM channel binding is not supported")
            raise ScramError("malformed SCRAM client-first message")
        attributes = _attributes(bare)
        if "n" not in attributes or "r" not in attributes or not attributes["r"]:
            raise ScramError("SCRAM client-first message lacks the user name or nonce")
        self.username = _username(attributes["n"])
        if authzid and authzid != f"a={attributes['n']}":
            raise ScramError("SCRAM authorization id must be the user name")
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = attributes["r"] + self._server_nonce()
        return self.username

    def respond_first(self, credential: ScramCredential | None) -> bytes:
        if credential is None or credential.mechanism != self.mechanism:
            # An unknown user gets a plausible challenge; the proof then fails.
            credential = unknown_user_credential(self.mechanism, self.username or "")
        else:
            self._known_user = True
        self._credential = credential
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        """Check client-final's proof; the server-final message, or ScramError."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM client-final message is not UTF-8") from None
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("SCRAM client-final message lacks the proof")
        attributes = _attributes(without_proof)
        # Kafka accepts a nonce that ends with the server's: older librdkafka (2.0) repeats
        # its own part in front.
        if not attributes.get("r", "").endswith(self._nonce):
            raise ScramError("SCRAM nonce does not match")
        expected_binding = base64.b64encode(self._gs2_header.encode()).decode()
        if attributes.get("c") != expected_binding:
            raise ScramError("SCRAM channel binding does not match")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("SCRAM proof is not base64") from None
        credential = self._credential
        assert credential is not None, "final() before respond_first()"
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.mechanism, credential.stored_key or b"\0", auth_message)
        if len(proof) != len(signature) or not self._known_user:
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        stored = hashlib.new(self.mechanism.hash_name, client_key).digest()
        if not hmac.compare_digest(stored, credential.stored_key):
            raise ScramError("invalid credentials")
        verifier = _hmac(self.mechanism, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(verifier)


class ScramClient:
    """The client side of one exchange (for raftka's own admin connections):
    `first()` → client-first, `final(server-first)` → client-final, `verify(server-final)`."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str) -> None:
        self.mechanism = mechanism
        self.password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._client_first_bare = f"n={name},r={os.urandom(18).hex()}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode()
            attributes = _attributes(text)
            nonce, salt = attributes["r"], base64.b64decode(attributes["s"], validate=True)
            iterations = int(attributes["i"])
        except (UnicodeDecodeError, KeyError, ValueError, ScramError):
            raise ScramError("malformed SCRAM server-first message") from None
        if not nonce.startswith(self._client_first_bare.rpartition("r=")[2]):
            raise ScramError("the server's SCRAM nonce does not extend ours")
        if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
            raise ScramError(f"the server asks for {iterations} SCRAM iterations")
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        credential = credential_from_salted(self.mechanism, salt, iterations, salted)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """ScramError unless the server proved it knows the credential."""
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not hmac.compare_digest(server_final, expected):
            raise ScramError("the server's SCRAM signature does not match")
