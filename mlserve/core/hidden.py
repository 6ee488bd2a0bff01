"""Error text that no client reads under ``--hide-errors``
(docs/security.md#errors-without-leaks).

A client reads a generic message with an error id; the log holds the whole text
with the same id. A text's id is a keyed hash of it (the key is random per
process): the same failure, shown in a repository index, a model's status and
every request for a model that failed to load, keeps one id and is logged once,
and an id tells nothing of its text. A fault, each with its own traceback, takes
a random id instead.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from collections import OrderedDict

__all__ = ["first_shown", "generic_text", "hidden", "random_error_id", "text_error_id"]

logger = logging.getLogger("mlserve.server")

_KEY = secrets.token_bytes(32)
_SHOWN_MAX = 4096  # ids whose text was logged; an older one is logged again when shown
_shown: OrderedDict[str, None] = OrderedDict()
_lock = threading.Lock()


def text_error_id(text: str) -> str:
    """The id of ``text``: the same in this process every time, 16 hex digits."""
    return hmac.new(_KEY, text.encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:16]


def random_error_id() -> str:
    """An id of its own, for one failure."""
    return secrets.token_hex(8)


def generic_text(error_id: str, status: int = 500) -> str:
    """What a client reads in place of an error's text."""
    if 400 <= status < 500:
        return f"request refused, error id {error_id}"
    return f"internal error, error id {error_id}"


def first_shown(error_id: str) -> bool:
    """Whether ``error_id`` is shown for the first time (its text is not in the log yet)."""
    with _lock:
        if error_id in _shown:
            _shown.move_to_end(error_id)
            return False
        _shown[error_id] = None
        if len(_shown) > _SHOWN_MAX:
            _shown.popitem(last=False)
        return True


def hidden(text: str, status: int = 500) -> str:
    """The generic message that replaces ``text``; the first time, the log says
    ``text`` with its id."""
    error_id = text_error_id(text)
    if first_shown(error_id):
        logger.error("error id %s: %s", error_id, text)
    return generic_text(error_id, status)
