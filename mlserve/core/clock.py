"""Timestamps as the records and responses write them: UTC text to the microsecond,
with the whole second's text reused while the second lasts (a tuple swap: safe from
any thread)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["when", "when_ns"]


# The last UTC second formatted: ((year, month, day, hour, minute, second), its text).
_second: tuple[tuple[int, ...] | None, str] = (None, "")


def when(start: datetime | int) -> str:
    """``start.isoformat(sep=" ", timespec="microseconds")`` (a ``time_ns()`` start: as
    its UTC datetime); a UTC start's second reuses its text (a tuple swap: safe from any
    thread)."""
    global _second
    if isinstance(start, int):  # (a datetime never is one)
        return when_ns(start)
    if start.tzinfo is not UTC:
        return start.isoformat(sep=" ", timespec="microseconds")
    key = (start.year, start.month, start.day, start.hour, start.minute, start.second)
    cached, second = _second
    if key != cached:
        second = start.isoformat(sep=" ", timespec="seconds")[:19]
        _second = (key, second)
    return f"{second}.{start.microsecond:06d}+00:00"


# The last whole second of a ``time_ns`` reading formatted: (seconds since the epoch, text).
_second_ns: tuple[int, str] = (-1, "")


def when_ns(ns: int) -> str:
    """``when`` of a ``time.time_ns()`` reading (UTC, to the microsecond below): the
    response's ``timestamp`` and the record's ``when``, with no datetime built unless the
    second changed."""
    global _second_ns
    seconds, micro = divmod(ns // 1000, 1_000_000)
    cached, second = _second_ns
    if cached != seconds:
        second = datetime.fromtimestamp(seconds, UTC).isoformat(sep=" ")[:19]
        _second_ns = (seconds, second)
    return f"{second}.{micro:06d}+00:00"
