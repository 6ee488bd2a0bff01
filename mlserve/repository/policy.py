"""Version policies and labels (docs/repository.md#version-policies-and-labels): which
versions of a model are served.

    latest            the highest version (default)
    latest N          the N highest versions
    all               every version on disk
    specific [1, 3]   exactly these versions (those present on disk)

Written in a YAML config as ``latest``, ``{latest: {num_versions: 2}}``,
``all``, ``{specific: {versions: [1, 3]}}`` (the JSON form of TF Serving's
``model_version_policy``). Labels name versions: ``{stable: 1, canary: 2}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["VersionPolicy"]

KINDS = ("latest", "all", "specific")


@dataclass(frozen=True)
class VersionPolicy:
    """Chooses the served versions among those on disk."""

    kind: str = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown version policy '{self.kind}', use one of {KINDS}")
        if self.kind == "latest" and self.num_versions < 1:
            raise ValueError("version policy 'latest' needs num_versions >= 1")
        if self.kind == "specific" and not self.versions:
            raise ValueError("version policy 'specific' needs at least one version")

    def select(self, available: Iterable[int]) -> list[int]:
        """The versions to serve, in ascending order."""
        ordered = sorted(available)
        if self.kind == "all":
            return ordered
        if self.kind == "specific":
            return [v for v in ordered if v in self.versions]
        return ordered[-self.num_versions :]

    @classmethod
    def parse(cls, value: object) -> VersionPolicy:
        """A policy from its config form: a kind name, or ``{kind: {arguments}}``."""
        if value is None:
            return cls()
        if isinstance(value, VersionPolicy):
            return value
        if isinstance(value, str):
            return cls(value)
        if not isinstance(value, dict) or len(value) != 1:
            raise ValueError(f"a version policy is a name or a one-key mapping, got {value!r}")
        kind, args = next(iter(value.items()))
        args = args or {}
        if kind == "latest":
            return cls("latest", num_versions=int(args.get("num_versions", 1)))
        if kind == "specific":
            return cls("specific", versions=tuple(int(v) for v in args.get("versions", ())))
        return cls(kind)


def parse_labels(value: Any) -> dict[str, int]:
    """Labels from a config: ``{label: version}``."""
    labels = dict(value or {})
    for label, version in labels.items():
        if not isinstance(label, str) or not label or label.isdigit():
            raise ValueError(f"a version label is a non-numeric name, got {label!r}")
        labels[label] = int(version)
    return labels
