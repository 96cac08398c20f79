"""The console's browser sessions: who a page acts for, held by the server, named by an HttpOnly cookie.

A person signs in once with the cluster's token (as Ray's dashboard asks for it) and the user name they act as;
the server then keeps ``session id -> (user, CSRF token)`` in memory and the browser keeps only the session id,
in a cookie that page scripts cannot read (HttpOnly) and that no other site's page sends (SameSite=Strict).
Every call a page makes also carries the session's CSRF token in a header, which a cross-site form cannot set.
The user name is a claim, exactly like ``CUBERAY_USER`` for the CLI (docs/security.md): the token proves the
person may use this cluster, not who they are.

Sessions live in the API server's process: a restarted server (Ray restarts its actor) forgets them, and the
page asks for the token again.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass

COOKIE = "cuberay_session"
CSRF_HEADER = "X-Cuberay-CSRF"
TTL_S = 12 * 3600.0  # a working day: then the page asks for the token again
MAX_SESSIONS = 10_000  # a flood of sign-ins evicts the oldest sessions instead of growing without bound
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,252}$")  # what CUBERAY_USER may hold, in practice


@dataclass(frozen=True)
class Session:
    id: str
    user: str
    csrf: str
    expires: float


class Sessions:
    """Open sessions by id; expired ones are dropped when looked up."""

    def __init__(self, ttl_s: float = TTL_S, clock=time.monotonic) -> None:
        self._by_id: dict[str, Session] = {}
        self._ttl_s = ttl_s
        self._clock = clock

    def open(self, user: str) -> Session:
        if not USER_NAME.match(user):
            raise ValueError(f"user name {user[:80]!r} is not one cuberay accepts: letters, digits and . _ @ -, "
                             f"starting with a letter or digit")
        if len(self._by_id) >= MAX_SESSIONS:
            oldest = min(self._by_id.values(), key=lambda s: s.expires)
            del self._by_id[oldest.id]
        session = Session(secrets.token_urlsafe(32), user, secrets.token_urlsafe(32), self._clock() + self._ttl_s)
        self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        session = self._by_id.get(session_id or "")
        if session is not None and session.expires <= self._clock():
            del self._by_id[session.id]
            return None
        return session

    def close(self, session_id: str | None) -> None:
        self._by_id.pop(session_id or "", None)
