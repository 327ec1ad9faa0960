"""The console's logins when the cluster uses SASL: a user name and password checked as
SASL/PLAIN checks them (a `sasl.plain.users` entry, else the user's SCRAM credential), and
the sessions they open. A session is a random token in an HttpOnly, SameSite=Strict cookie;
it carries its own CSRF token and ends after SESSION_IDLE_S without a request."""

from __future__ import annotations

import http.cookies
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftka.broker.clock import Clock

COOKIE = "raftka_console"
SESSION_IDLE_S = 30 * 60.0
#: Sessions kept at most; a new login past it ends the one idle longest.
SESSIONS_MAX = 1000


@dataclass(slots=True)
class ConsoleSession:
    user: str
    csrf_token: str
    last_used_s: float


class Sessions:
    """The open sessions of one console, by token."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._by_token: dict[str, ConsoleSession] = {}

    def open(self, user: str) -> str:
        """A new session of `user`; its token (the cookie's value)."""
        now = self.clock.now_s()
        self._expire(now)
        if len(self._by_token) >= SESSIONS_MAX:
            idlest = min(self._by_token, key=lambda t: self._by_token[t].last_used_s)
            del self._by_token[idlest]
        token = secrets.token_urlsafe(32)
        self._by_token[token] = ConsoleSession(user, secrets.token_urlsafe(32), now)
        return token

    def find(self, cookie_header: str | None) -> tuple[str, ConsoleSession] | None:
        """The session the request's Cookie names, when open and not expired (its idle time
        restarts); None otherwise."""
        token = session_token(cookie_header)
        if token is None:
            return None
        now = self.clock.now_s()
        session = self._by_token.get(token)
        if session is None or now - session.last_used_s > SESSION_IDLE_S:
            self._by_token.pop(token, None)
            return None
        session.last_used_s = now
        return token, session

    def close(self, token: str) -> None:
        self._by_token.pop(token, None)

    def _expire(self, now: float) -> None:
        for token in [t for t, s in self._by_token.items() if now - s.last_used_s > SESSION_IDLE_S]:
            del self._by_token[token]


def session_token(cookie_header: str | None) -> str | None:
    if not cookie_header:
        return None
    jar = http.cookies.SimpleCookie()
    try:
        jar.load(cookie_header)
    except http.cookies.CookieError:
        return None
    morsel = jar.get(COOKIE)
    return None if morsel is None else morsel.value


def set_cookie(token: str, secure: bool) -> tuple[str, str]:
    """The session cookie; `secure` (the console is served over TLS): sent back only over TLS."""
    flags = "; Secure" if secure else ""
    return ("Set-Cookie", f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{flags}")


def clear_cookie(secure: bool) -> tuple[str, str]:
    flags = "; Secure" if secure else ""
    return ("Set-Cookie", f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{flags}")
