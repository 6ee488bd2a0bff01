"""The network faces' security and limit settings, in one object.

Every value has a documented default (docs/security.md) and comes from a CLI
flag or its ``MLSERVE_*`` environment variable; the faces (lean HTTP, ASGI,
gRPC) read the same object, and the way answers write NaN is set from it
(docs/protocol.md#nan-and-infinities). Server-side limits (request timeout, per-model
concurrency) live with the server, not here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mlserve.protocol.nonfinite import FORMS

__all__ = ["FaceSettings", "MiB", "split_secrets"]

MiB = 1024 * 1024


def split_secrets(*values: str | None) -> tuple[str, ...]:
    """Tokens or ``user:password`` pairs from comma-separated strings (flags, env)."""
    found: list[str] = []
    for value in values:
        found += [part.strip() for part in (value or "").split(",") if part.strip()]
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class FaceSettings:
    """What the faces enforce before a request reaches the server."""

    auth_tokens: tuple[str, ...] = field(default=(), repr=False)  # bearer tokens
    admin_tokens: tuple[str, ...] = field(default=(), repr=False)  # also allowed to load/unload
    basic_users: tuple[str, ...] = field(default=(), repr=False)  # "user:password"
    auth_readiness: bool = False  # readiness probes need credentials too
    max_body_bytes: int = 64 * MiB  # 413 (after Content-Encoding decoding too)
    max_header_bytes: int = 64 * 1024  # all header lines together: 431
    max_headers: int = 100  # 431
    max_url_bytes: int = 8 * 1024  # 414
    header_timeout: float = 10.0  # seconds to send a request's head: then closed
    keep_alive_timeout: float = 5.0  # an idle keep-alive connection is closed
    max_connections: int = 2048  # more are closed at once (the backlog holds the rest)
    max_connections_per_client: int = 0  # from one address, 429 past it (0: max_connections / 8)
    max_client_rate: float = 0.0  # requests per second from one address, 429 past it (0: off)
    body_timeout: float = 60.0  # seconds to send a request's body: 408, then closed
    write_buffer_bytes: int = 256 * 1024  # unread answer bytes before a connection stops reading
    write_timeout: float = 30.0  # seconds those may stay unread: then the connection is cut
    hide_errors: bool = False  # a model's exception text becomes a generic message + error id
    json_nonfinite: str = "literal"  # NaN/Infinity in answers: literal, null or string
    no_console: bool = False  # no web console at /console (docs/console.md)

    def __post_init__(self) -> None:
        if self.json_nonfinite not in FORMS:
            raise ValueError(
                f"json_nonfinite (--json-nonfinite, MLSERVE_JSON_NONFINITE) must be one of "
                f"{', '.join(FORMS)}, not {self.json_nonfinite!r}"
            )
        if self.max_connections_per_client <= 0:  # a share of the cap, so one address can't fill it
            share = max(1, self.max_connections // 8)
            object.__setattr__(self, "max_connections_per_client", share)

    @cached_property  # asked on every request
    def auth_enabled(self) -> bool:
        return bool(self.auth_tokens or self.admin_tokens or self.basic_users)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **given: object) -> FaceSettings:
        """Settings from ``MLSERVE_*`` variables; ``given`` (flags that were set) win."""
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {
            "auth_tokens": split_secrets(env.get("MLSERVE_AUTH_TOKEN")),
            "admin_tokens": split_secrets(env.get("MLSERVE_ADMIN_TOKEN")),
            "basic_users": split_secrets(env.get("MLSERVE_BASIC_AUTH")),
        }
        for name, kind in _ENV_FIELDS.items():
            raw = env.get("MLSERVE_" + name.upper())
            if raw is not None and raw != "":
                values[name] = _parse(kind, raw)
        values.update({k: v for k, v in given.items() if v is not None and v != ()})
        return cls(**values)


_ENV_FIELDS: dict[str, type] = {
    "auth_readiness": bool,
    "max_body_bytes": int,
    "max_header_bytes": int,
    "max_headers": int,
    "max_url_bytes": int,
    "header_timeout": float,
    "keep_alive_timeout": float,
    "max_connections": int,
    "max_connections_per_client": int,
    "max_client_rate": float,
    "body_timeout": float,
    "write_buffer_bytes": int,
    "write_timeout": float,
    "hide_errors": bool,
    "json_nonfinite": str,
    "no_console": bool,
}


def _parse(kind: type, raw: str) -> Any:
    if kind is bool:
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return kind(raw)
