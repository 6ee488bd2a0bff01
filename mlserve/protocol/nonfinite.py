"""How answers write NaN and infinities: one rule for every face and form
(docs/protocol.md#nan-and-infinities).

JSON has no NaN. Triton and TF Serving write bare ``NaN``, ``Infinity`` and
``-Infinity`` (rapidjson's kWriteNanAndInfFlag), as Python's json does, and
tritonclient's JSON mode reads them back: that is the default, ``literal``. Strict
parsers (orjson, JavaScript's ``JSON.parse``, Go) refuse those tokens, so their
clients may ask for ``null`` or for the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` (``string``). The rule is the process's: ``mlserve serve`` sets it
from ``--json-nonfinite`` (``MLSERVE_JSON_NONFINITE``); the model-log stream, read
by other programs, writes null whatever it says.

orjson writes every non-finite float as null, so a finite answer pays one search of
its bytes for ``null`` (``tensors.dumps``); only JSON that holds one is written again,
from :func:`marked`.
"""

from __future__ import annotations

import math
import re
import secrets
from typing import Any

import numpy as np

__all__ = ["FORMS", "json_nonfinite", "marked", "set_json_nonfinite", "unmarked"]

FORMS = ("literal", "null", "string")

_TEXT = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
# literal: a number is first written as this marked string, and unmarked turns the string
# into the bare token; the random part keeps a client's own strings from ever matching.
_MARK = f"\x00{secrets.token_hex(8)}:"
_MARK_JSON = b'"\\u0000' + _MARK[1:].encode()
_MARKED = re.compile(re.escape(_MARK_JSON) + rb'(NaN|Infinity|-Infinity)"')
_WRITTEN = {
    "literal": {key: _MARK + text for key, text in _TEXT.items()},
    "string": _TEXT,
}

_form = "literal"


def set_json_nonfinite(form: str) -> str:
    """Make this process's answers write NaN and infinities as ``form`` (one of
    :data:`FORMS`); returns the form it replaces."""
    global _form
    if form not in FORMS:
        raise ValueError(f"json_nonfinite must be one of {', '.join(FORMS)}, not {form!r}")
    previous, _form = _form, form
    return previous


def json_nonfinite() -> str:
    """The process's rule: ``literal`` (the default), ``null`` or ``string``."""
    return _form


def marked(value: object, form: str = "") -> Any:
    """``value`` with each NaN and infinity in its dicts, lists, tuples and numpy values
    as the string the rule (or ``form``) writes (``literal``: marked, for
    :func:`unmarked`); the containers are copies, ``value`` is left untouched."""
    written = _WRITTEN.get(form or _form)
    return value if written is None else _marked(value, written)


def unmarked(data: bytes, form: str = "") -> bytes:
    """JSON written from :func:`marked` under ``literal``, the marks made bare tokens."""
    return _MARKED.sub(rb"\1", data) if (form or _form) == "literal" else data


def _marked(value: object, written: dict[str, str]) -> Any:
    if isinstance(value, float | np.floating):
        return value if math.isfinite(value) else written[repr(float(value))]
    if isinstance(value, dict):
        return {key: _marked(item, written) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_marked(item, written) for item in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "fcO":
        if value.ndim == 1 and value.dtype.kind == "f":  # a tensor's data: only its bad numbers
            items = value.tolist()
            for index in np.flatnonzero(~np.isfinite(value)).tolist():
                items[index] = written[repr(items[index])]
            return items
        return _marked(value.tolist(), written)
    return value
