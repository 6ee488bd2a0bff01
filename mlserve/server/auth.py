"""Who may call: bearer tokens, basic users and admin tokens, checked alike by every
face (the HTTP faces per request, gRPC in an interceptor;
docs/security.md#authentication-off-by-default).
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Iterable

from mlserve.core.events import Response
from mlserve.core.settings import FaceSettings
from mlserve.server.console import is_console_page

__all__ = ["LIVENESS_PATHS", "READINESS_PATHS", "authorize", "matches_any", "needs_admin"]

LIVENESS_PATHS = frozenset({"/v2/health/live"})
READINESS_PATHS = frozenset({"/v2/health/ready"})
_ADMIN_PREFIXES = ("/v2/repository/models/", "/v2/systemsharedmemory", "/v2/cudasharedmemory")
_CHALLENGE = 'Bearer realm="mlserve", Basic realm="mlserve"'
# The console's data calls: no Basic challenge, which would open the browser's own
# login box over the page's (docs/console.md#data-endpoints).
_CONSOLE_CHALLENGE = 'Bearer realm="mlserve"'
_READS = frozenset({"GET", "HEAD"})


def matches_any(secret: str, allowed: Iterable[str]) -> bool:
    """``secret`` is one of ``allowed``, compared in constant time (every entry is tried)."""
    found = False
    for candidate in allowed:
        found |= hmac.compare_digest(secret.encode(), candidate.encode())
    return found


def _credentials(settings: FaceSettings, authorization: str) -> tuple[bool, bool]:
    """(authenticated, admin) for an Authorization header value."""
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    scheme = scheme.lower()
    if scheme == "bearer" and value:
        admin = matches_any(value, settings.admin_tokens)
        return admin or matches_any(value, settings.auth_tokens), admin
    if scheme == "basic" and value:
        try:
            pair = base64.b64decode(value, validate=True).decode("utf-8")
        except ValueError:
            return False, False
        return matches_any(pair, settings.basic_users), False
    return False, False


def needs_admin(path: str) -> bool:
    """Loading and unloading models, and shared memory (docs/protocol.md#system-shared-memory),
    take an admin token."""
    return path.startswith(_ADMIN_PREFIXES)


def _console_page(settings: FaceSettings, method: str, path: str, accept: str) -> bool:
    """The console's page and files, and a browser's ``GET /`` (sent on to them), need
    no credentials: they hold no data (docs/security.md#the-web-console)."""
    if settings.no_console or method not in _READS:
        return False
    return is_console_page(path) or (path == "/" and "text/html" in accept)


def authorize(
    settings: FaceSettings, path: str, authorization: str, method: str = "", accept: str = ""
) -> Response | None:
    """None when the request may pass; else its 401 (or 403 for a non-admin load/unload).
    ``method`` and ``accept`` (the Accept header): what tells a console page's request."""
    if not settings.auth_enabled or path in LIVENESS_PATHS:
        return None
    if path in READINESS_PATHS and not settings.auth_readiness:
        return None
    authenticated, admin = _credentials(settings, authorization)
    if not authenticated:
        if method and _console_page(settings, method, path, accept):
            return None
        challenge = _CONSOLE_CHALLENGE if path.startswith("/console/") else _CHALLENGE
        return Response(
            {"error": "authentication required"}, 401, headers={"WWW-Authenticate": challenge}
        )
    if needs_admin(path) and not admin:
        what = (
            "loading and unloading models"
            if path.startswith("/v2/repository/")
            else "shared memory"
        )
        return Response({"error": f"{what} needs an admin token"}, 403)
    return None
