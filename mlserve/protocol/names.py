"""Request targets whose names could leave their place: a model name or path from a
request names one thing of the server, never a path outside the model repository
(docs/security.md#model-control-off-by-default). The faces and the mock server check
alike."""

from __future__ import annotations

import re

__all__ = ["dot_name", "target_error"]

# Percent-encoded slash, backslash or NUL: a name that would decode into a path.
_ENCODED_SEPARATOR = re.compile(rb"%(2f|5c|00)", re.IGNORECASE)


# Targets found allowed, raw -> decoded: a server sees the same few paths again and
# again (one look-up instead of six scans). Bounded: past _ALLOWED_MAX, none are added.
_ALLOWED: dict[bytes, str] = {}
_ALLOWED_MAX = 1024


def target_error(raw_path: bytes, path: str) -> str | None:
    """Why the target (raw and decoded path) is refused with a 400, or None."""
    try:
        if _ALLOWED.get(raw_path) == path:
            return None
    except TypeError:  # a bytearray target: no key, checked below
        pass
    if b"%" not in raw_path and "\\" not in path and "\x00" not in path:
        # the common target: no escapes; "." and ".." names follow a "/" or a ":" (a
        # version or verb suffix: ``/v1/models/..:predict``, ``m:..``) or open the path
        if "/." not in path and ":." not in path and "//" not in path and not path.startswith("."):
            if len(_ALLOWED) < _ALLOWED_MAX:
                _ALLOWED[bytes(raw_path)] = path  # a copy: a bytearray could change
            return None
    if _ENCODED_SEPARATOR.search(raw_path) or "\x00" in path or "\\" in path:
        return "encoded separators and NUL are not allowed in a request path"
    if "//" in path or any(dot_name(part) for part in path.split("/")):
        return "'..', '.' and empty names are not allowed in a request path"
    return None


def dot_name(segment: str) -> bool:
    """A path segment naming ``.`` or ``..``: whole, or before or after a ``:`` (TF
    Serving's ``..:predict``, a ``name:version`` route key such as ``..:1``)."""
    return segment in (".", "..") or (
        ":" in segment and any(piece in (".", "..") for piece in segment.split(":"))
    )
