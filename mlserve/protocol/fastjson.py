"""Big V2 JSON bodies to numpy without a Python object per number
(docs/security.md#limits).

A JSON parser makes a Python float (24 bytes) plus a list slot (8 bytes) for
every element of a tensor's ``data``: a 40 MB body cost 230 MB. Here a flat
numeric ``"data": [...]`` array of a big body is cut out of the text and parsed
a megabyte at a time into numpy, so only that megabyte's numbers exist as
objects at once; the rest of the document (small) is parsed as usual. Anything
unusual (nesting, strings, NaN tokens, ints past 64 bits) keeps the ordinary
path, so the result never differs from ``loads`` but in the type of the
``data`` of V2 input tensors (an ndarray, not a list).
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import numpy as np

from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.tensors import loads

__all__ = ["FAST_BYTES", "loads_tensors"]

# Bodies at least this long take the fast path; arrays shorter than MIN_ARRAY bytes stay in it.
FAST_BYTES = 1 << 20
MIN_ARRAY = 1 << 16

# "data": [ flat JSON numbers ] (no nesting, strings, literals or NaN tokens).
_DATA = re.compile(rb'"data"\s*:\s*\[([-+0-9.eE,\s]*)\]')
CHUNK = 1 << 20  # bytes of numbers parsed at a time: ~40k Python floats alive at once


def _numbers(raw: bytes, start: int, end: int) -> np.ndarray[Any, Any] | None:
    """The numbers of ``raw[start:end]``, parsed a chunk at a time by the JSON parser
    (so exactly as JSON reads them); None when the ordinary path must decide."""
    parts: list[np.ndarray[Any, Any]] = []
    while start < end:
        stop = raw.find(b",", min(start + CHUNK, end), end)
        stop = end if stop < 0 else stop
        try:
            values = loads(b"[" + raw[start:stop] + b"]")
        except InvalidInput:
            return None
        part = np.asarray(values)
        if part.dtype.kind not in "iuf" or part.ndim != 1:
            return None  # ints past 64 bits, an empty array: the ordinary path decides
        parts.append(part)
        start = stop + 1
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def loads_tensors(body: bytes | bytearray | memoryview | str) -> Any:
    """``loads(body)``, with the big flat numeric ``data`` arrays of V2 input tensors
    read as numpy arrays."""
    if isinstance(body, str) or len(body) < FAST_BYTES:
        return loads(body)
    raw = bytes(body) if not isinstance(body, bytes) else body
    pieces: list[bytes] = []
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    token = secrets.token_hex(8)
    end = 0
    for match in _DATA.finditer(raw):
        start, stop = match.span(1)
        if stop - start < MIN_ARRAY:
            continue
        array = _numbers(raw, start, stop)
        if array is None:
            continue
        key = f"{token}:{len(arrays)}"
        arrays[key] = array
        pieces.append(raw[end : match.start()])
        pieces.append(b'"data":"' + key.encode() + b'"')
        end = match.end()
    if not arrays:
        return loads(raw)
    pieces.append(raw[end:])
    doc = loads(b"".join(pieces))
    del pieces
    _put_back(doc, arrays)
    return doc


def _put_back(doc: object, arrays: dict[str, np.ndarray[Any, Any]]) -> None:
    """Arrays of V2 input tensors stay numpy; any other cut-out array becomes a list again."""
    inputs = doc.get("inputs") if isinstance(doc, dict) else None
    for obj in inputs if isinstance(inputs, list) else ():
        if isinstance(obj, dict) and "datatype" in obj and isinstance(obj.get("data"), str):
            array = arrays.pop(obj["data"], None)
            if array is not None:
                obj["data"] = array
    if arrays:
        _restore(doc, arrays)


def _restore(value: object, arrays: dict[str, np.ndarray[Any, Any]]) -> None:
    stack = [value]
    while stack and arrays:
        item = stack.pop()
        if isinstance(item, dict):
            for key, data in item.items():
                if isinstance(data, str) and data in arrays:
                    item[key] = arrays.pop(data).tolist()
            stack.extend(v for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
