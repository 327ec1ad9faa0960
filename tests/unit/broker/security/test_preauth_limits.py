"""Limits before authentication: the pre-authentication frame size config, and SASL/PLAIN's
password check, which costs one PBKDF2 derivation in a worker thread whoever the user is."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

from raftka.broker.config import BrokerConfig, ConfigError
from raftka.broker.security.scram import ScramCredential, ScramMechanism, make_credential
from raftka.broker.security.session import PLAIN_CHECKS_AT_ONCE, Authenticator

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


def test_sasl_server_max_receive_size_is_kafkas_config() -> None:
    assert BrokerConfig(environ={}).get_int("sasl.server.max.receive.size") == 524288
    smaller = BrokerConfig({"sasl.server.max.receive.size": "1024"}, environ={})
    assert smaller.get_int("sasl.server.max.receive.size") == 1024
    with pytest.raises(ConfigError, match="sasl.server.max.receive.size"):
        BrokerConfig({"sasl.server.max.receive.size": "0"}, environ={})


class _Derivations:
    """Wraps hashlib.pbkdf2_hmac: counts derivations, the threads they ran on, and how
    many ran at once."""

    def __init__(self, pause_s: float = 0.0) -> None:
        self.pause_s = pause_s
        self.threads: list[int] = []
        self.running = 0
        self.running_max = 0
        self._lock = threading.Lock()
        self._real: Callable[..., bytes] = hashlib.pbkdf2_hmac

    def __call__(self, *args: Any, **kwargs: Any) -> bytes:
        with self._lock:
            self.threads.append(threading.get_ident())
            self.running += 1
            self.running_max = max(self.running_max, self.running)
        try:
            time.sleep(self.pause_s)
            return self._real(*args, **kwargs)
        finally:
            with self._lock:
                self.running -= 1


def _authenticator(credentials: dict[tuple[str, int], ScramCredential]) -> Authenticator:
    config = BrokerConfig(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.plain.users": "alice:alice-secret",
        },
        environ={},
    )
    return Authenticator(config, lambda: credentials)


@pytest.fixture
def credentials() -> dict[tuple[str, int], ScramCredential]:
    return {
        ("bob", int(SHA512)): make_credential(SHA512, "bob-secret"),
        ("dora", int(SHA256)): make_credential(SHA256, "dora-secret"),
    }


@pytest.mark.parametrize(
    ("user", "password", "expected"),
    [
        ("alice", "alice-secret", True),  # sasl.plain.users
        ("alice", "wrong", False),
        ("bob", "bob-secret", True),  # SCRAM-SHA-512 credential
        ("bob", "wrong", False),
        ("dora", "dora-secret", True),  # SCRAM-SHA-256 credential
        ("nobody", "anything", False),  # unknown
    ],
)
def test_plain_check_costs_one_derivation_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
    credentials: dict[tuple[str, int], ScramCredential],
    user: str,
    password: str,
    expected: bool,
) -> None:
    authenticator = _authenticator(credentials)
    derivations = _Derivations()
    monkeypatch.setattr(hashlib, "pbkdf2_hmac", derivations)

    async def main() -> tuple[bool, int]:
        return await authenticator.check_plain("SASL_PLAINTEXT", user, password), (
            threading.get_ident()
        )

    matched, loop_thread = trio.run(main)
    assert matched is expected
    # Known, configured and unknown users alike: exactly one derivation, never on the loop.
    assert len(derivations.threads) == 1, f"{user}: {len(derivations.threads)} derivations"
    assert derivations.threads[0] != loop_thread


def test_plain_checks_run_at_most_a_few_at_once_and_leave_the_loop_free(
    monkeypatch: pytest.MonkeyPatch, credentials: dict[tuple[str, int], ScramCredential]
) -> None:
    authenticator = _authenticator(credentials)
    derivations = _Derivations(pause_s=0.05)
    monkeypatch.setattr(hashlib, "pbkdf2_hmac", derivations)
    logins = 6
    results: list[bool] = []
    ticks = 0

    async def login(user: str) -> None:
        results.append(await authenticator.check_plain("SASL_PLAINTEXT", user, "wrong"))

    async def tick(done: trio.Event) -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += derivations.running > 0
            await trio.sleep(0.005)

    async def main() -> None:
        done = trio.Event()
        async with trio.open_nursery() as outer:
            outer.start_soon(tick, done)
            async with trio.open_nursery() as nursery:
                for i in range(logins):
                    nursery.start_soon(login, "bob" if i % 2 else f"ghost-{i}")
            done.set()

    trio.run(main)
    assert results == [False] * logins
    assert len(derivations.threads) == logins
    assert derivations.running_max == PLAIN_CHECKS_AT_ONCE
    # Other tasks ran while derivations were running (a derivation on the loop blocks them).
    assert ticks > 0
