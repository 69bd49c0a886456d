"""Signing in to the dashboard: a token entered once per browser session, kept by the service, never in a URL.

The sign-in form posts the token (the API's: the admin token or one from `dreamflow token create`); the
service keeps it in memory under a random session id, and the browser gets only that id, in an HttpOnly,
SameSite=Strict cookie scoped to `/ui` and named after the service's port (services on other ports of one
host do not overwrite each other's). Every request asks the token file again (`engine.config.grants.Tokens`), so a
revoked token signs its sessions out. Each session has a CSRF token that every form of the dashboard sends
back. Without any token configured, everyone is the admin (as on the API) and a session is made at the first
visit, for its CSRF token only.

Sessions live in the service process: a restart signs everyone out. At most MAX_SESSIONS are kept (the least
recently used go first), and one unused for IDLE_SECONDS goes.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from engine.config.grants import Grant, Tokens

MAX_SESSIONS = 1_000
IDLE_SECONDS = 7 * 24 * 3600
COOKIE = "dreamflow_ui"  # + `_<port>`


@dataclass
class Session:
    id: str
    secret: str | None  # the token signed in with; None: made while no token was configured
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    used: float = field(default_factory=time.monotonic)


class Sessions:
    """The dashboard's signed-in browsers, checked against `tokens` on every request."""

    def __init__(self, tokens: Tokens):
        self.tokens = tokens
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def required(self) -> bool:
        """Whether signing in is needed (a token is configured)."""
        return self.tokens.required

    def start(self, secret: str | None) -> Session | None:
        """A new session for `secret` (None: no token configured), None when the token is not valid."""
        if secret is not None and self.tokens.grant(secret) is None:
            return None
        if secret is None and self.tokens.required:
            return None
        session = Session(secrets.token_urlsafe(32), secret)
        with self._lock:
            self._by_id[session.id] = session
            while len(self._by_id) > MAX_SESSIONS:
                self._by_id.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of a cookie's id, None when unknown or idle too long."""
        if not session_id:
            return None
        with self._lock:
            session = self._by_id.get(session_id)
            if session is None:
                return None
            if time.monotonic() - session.used > IDLE_SECONDS:
                del self._by_id[session_id]
                return None
            session.used = time.monotonic()
            self._by_id.move_to_end(session_id)
            return session

    def grant(self, session: Session | None) -> Grant | None:
        """What the session may do now: its token's grant (None once revoked, or for a session made without a
        token after one was configured)."""
        if session is None:
            return None
        if session.secret is None:
            return self.tokens.grant(None)
        return self.tokens.grant(session.secret)

    def end(self, session: Session) -> None:
        with self._lock:
            self._by_id.pop(session.id, None)


def cookie_name(port: int | None) -> str:
    return f"{COOKIE}_{port}" if port else COOKIE


def csrf_ok(session: Session | None, sent: str | None) -> bool:
    """Whether a form carries its session's CSRF token."""
    return session is not None and bool(sent) and hmac.compare_digest(session.csrf.encode(), str(sent).encode())
