"""Stores of endpoint records: in memory, or any SQLAlchemy database.

SQLite at ``<data dir>/endpoints.db`` is the default; PostgreSQL (or any
SQLAlchemy URL) comes from the ``endpoint_store_url`` function parameter or
the ``MLSERVE_ENDPOINT_STORE`` environment variable. The uid is the primary
key, so a restart or a second replica never duplicates a record; request
counters are updated in place by one UPDATE, never read-modify-written.

Three writers share a record without overwriting each other: the server
registers the record (``upsert``: spec and shape), its request counters
(``add_counts``) and a shadow's agreement counters (``add_shadow_counts``, added in
place as the request counters are), and the monitor its window's results (``write_windows``: the
``monitoring`` column, merged into ``status`` on read). The monitor's partition
state (docs/monitoring.md#nothing-lost-nothing-counted-twice) is written in the
same transaction as the results it accounts for.
"""

from __future__ import annotations

import builtins
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlserve.monitoring.endpoints import (
    SHADOW_RESULTS,
    ModelEndpoint,
    RequestCounts,
    shadow_metrics,
)
from mlserve.protocol.tensors import dumps_strict

__all__ = [
    "MONITOR_FIELDS",
    "MemoryEndpointStore",
    "SQLEndpointStore",
    "data_dir",
    "default_store_url",
    "open_store",
]

MONITOR_FIELDS = ("current_stats", "drift_measures", "drift_status", "window", "results")
"""The status fields the monitor owns (``write_windows``); the server never writes them."""

MEMORY_URL = "memory://"
SHADOW_COLUMNS = tuple(f"shadow_{name}" for name in SHADOW_RESULTS)


def data_dir(parameters: dict[str, Any] | None = None) -> Path:
    """Where embedded data goes: parameter ``data_dir``, env MLSERVE_DATA_DIR, ./mlserve-data."""
    chosen = (
        (parameters or {}).get("data_dir") or os.environ.get("MLSERVE_DATA_DIR") or "mlserve-data"
    )
    return Path(os.path.expanduser(chosen))


def default_store_url(parameters: dict[str, Any] | None = None) -> str:
    params = parameters or {}
    url = params.get("endpoint_store_url") or os.environ.get("MLSERVE_ENDPOINT_STORE")
    return str(url) if url else f"sqlite:///{data_dir(params) / 'endpoints.db'}"


def open_store(url: str | None = None) -> MemoryEndpointStore | SQLEndpointStore:
    url = url or default_store_url()
    return MemoryEndpointStore() if url == MEMORY_URL else SQLEndpointStore(url)


def _with_monitoring(endpoint: ModelEndpoint, monitoring: dict[str, Any] | None) -> ModelEndpoint:
    """The record with the monitor's fields of its last window (a copy)."""
    if monitoring:
        endpoint = endpoint.model_copy(
            update={"status": endpoint.status.model_copy(update=monitoring)}
        )
    return endpoint


def _with_counts(
    endpoint: ModelEndpoint, counts: RequestCounts | None, shadow: dict[str, int] | None = None
) -> ModelEndpoint:
    endpoint = endpoint.model_copy(deep=True)
    if counts is not None:
        endpoint.status.first_request = counts.first
        endpoint.status.last_request = counts.last
        endpoint.status.error_count = counts.errors
        endpoint.status.metrics["requests"] = counts.requests
    if shadow is not None and any(shadow.values()):
        endpoint.status.metrics["shadow"] = shadow_metrics(shadow)
    return endpoint


class MemoryEndpointStore:
    """Records in a dict: for the mock server and tests."""

    def __init__(self) -> None:
        self._records: dict[str, ModelEndpoint] = {}
        self._counts: dict[str, RequestCounts] = {}
        self._shadows: dict[str, dict[str, int]] = {}
        self._monitoring: dict[str, dict[str, Any]] = {}
        self._partitions: dict[tuple[str, int], dict[str, Any]] = {}

    def upsert(self, endpoint: ModelEndpoint) -> None:
        self._records[endpoint.metadata.uid] = endpoint.model_copy(deep=True)

    def add_counts(self, uid: str, counts: RequestCounts) -> None:
        current = self._counts.get(uid)
        if current is None:
            self._counts[uid] = RequestCounts(
                counts.first, counts.last, counts.requests, counts.errors
            )
        else:
            current.merge(counts)

    def add_shadow_counts(self, uid: str, counts: dict[str, int]) -> None:
        """Add to a shadow's agreement counters (``SHADOW_RESULTS``)."""
        current = self._shadows.setdefault(uid, dict.fromkeys(SHADOW_RESULTS, 0))
        for name in SHADOW_RESULTS:
            current[name] += counts.get(name, 0)

    def write_windows(
        self,
        results: dict[str, dict[str, Any]],
        source: str = "",
        partition: int = 0,
        state: dict[str, Any] | None = None,
    ) -> None:
        """Each endpoint's monitor fields (``MONITOR_FIELDS``), and the partition's state."""
        for uid, fields in results.items():
            self._monitoring[uid] = _monitor_fields(fields)
        if state is not None:
            self._partitions[(source, partition)] = state

    def partition_state(self, source: str, partition: int) -> dict[str, Any] | None:
        return self._partitions.get((source, partition))

    def get(self, uid: str) -> ModelEndpoint | None:
        record = self._records.get(uid)
        return None if record is None else self._full(uid, record)

    def list(self, project: str | None = None) -> list[ModelEndpoint]:
        return [
            self._full(uid, r)
            for uid, r in self._records.items()
            if project is None or r.metadata.project == project
        ]

    def _full(self, uid: str, record: ModelEndpoint) -> ModelEndpoint:
        counts = _with_counts(record, self._counts.get(uid), self._shadows.get(uid))
        return _with_monitoring(counts, self._monitoring.get(uid))

    def close(self) -> None:
        """Nothing to release."""


class SQLEndpointStore:
    """One row per endpoint: the record as JSON, and its counters as columns."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.url = url
        self._sa = sa
        self._engine = sa.create_engine(url, future=True)
        metadata = sa.MetaData()
        self._table = sa.Table(
            "model_endpoints",
            metadata,
            sa.Column("uid", sa.String(40), primary_key=True),
            sa.Column("project", sa.String(255), index=True, nullable=False),
            sa.Column("record", sa.Text, nullable=False),
            sa.Column("first_request", sa.String(40)),
            sa.Column("last_request", sa.String(40)),
            sa.Column("requests", sa.Integer, nullable=False, default=0),
            sa.Column("error_count", sa.Integer, nullable=False, default=0),
            sa.Column("monitoring", sa.Text),
            *(sa.Column(name, sa.Integer, nullable=False, default=0) for name in SHADOW_COLUMNS),
        )
        self._partitions = sa.Table(
            "monitor_partitions",
            metadata,
            sa.Column("source", sa.String(512), primary_key=True),
            sa.Column("partition", sa.Integer, primary_key=True),
            sa.Column("state", sa.Text, nullable=False),
        )
        metadata.create_all(self._engine)
        columns = {c["name"] for c in sa.inspect(self._engine).get_columns("model_endpoints")}
        added = [] if "monitoring" in columns else ["monitoring TEXT"]  # before the monitor
        added += [f"{name} INTEGER NOT NULL DEFAULT 0" for name in SHADOW_COLUMNS]  # ... shadows
        for column in added:
            if column.partition(" ")[0] not in columns:
                with self._engine.begin() as conn:
                    conn.execute(sa.text(f"ALTER TABLE model_endpoints ADD COLUMN {column}"))

    def upsert(self, endpoint: ModelEndpoint) -> None:
        sa, table = self._sa, self._table
        uid = endpoint.metadata.uid
        record = endpoint.model_dump_json()
        with self._engine.begin() as conn:
            current = conn.execute(sa.select(table.c.record).where(table.c.uid == uid)).scalar()
            if current == record:
                return
            if current is not None:
                conn.execute(
                    table.update()
                    .where(table.c.uid == uid)
                    .values(record=record, project=endpoint.metadata.project)
                )
                return
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    table.insert().values(
                        uid=uid,
                        project=endpoint.metadata.project,
                        record=record,
                        requests=0,
                        error_count=0,
                        **dict.fromkeys(SHADOW_COLUMNS, 0),
                    )
                )
        except sa.exc.IntegrityError:  # another replica registered it first
            with self._engine.begin() as conn:
                conn.execute(table.update().where(table.c.uid == uid).values(record=record))

    def add_counts(self, uid: str, counts: RequestCounts) -> None:
        sa, c = self._sa, self._table.c
        first, last = _stamp(counts.first), _stamp(counts.last)
        later = sa.or_(c.last_request.is_(None), c.last_request < last)
        earlier = sa.or_(c.first_request.is_(None), c.first_request > first)
        with self._engine.begin() as conn:
            conn.execute(
                self._table.update()
                .where(c.uid == uid)
                .values(
                    requests=c.requests + counts.requests,
                    error_count=c.error_count + counts.errors,
                    first_request=sa.case((earlier, first), else_=c.first_request),
                    last_request=sa.case((later, last), else_=c.last_request),
                )
            )

    def add_shadow_counts(self, uid: str, counts: dict[str, int]) -> None:
        """Add to a shadow's agreement counters in one UPDATE (workers' counts add up)."""
        c = self._table.c
        values = {
            f"shadow_{name}": c[f"shadow_{name}"] + counts.get(name, 0) for name in SHADOW_RESULTS
        }
        with self._engine.begin() as conn:
            conn.execute(self._table.update().where(c.uid == uid).values(**values))

    def write_windows(
        self,
        results: dict[str, dict[str, Any]],
        source: str = "",
        partition: int = 0,
        state: dict[str, Any] | None = None,
    ) -> None:
        """Each endpoint's monitor fields (``MONITOR_FIELDS``) and the partition's state,
        in one transaction: a monitor killed at any point leaves both or neither."""
        import orjson

        table = self._table
        with self._engine.begin() as conn:
            for uid, fields in results.items():
                text = dumps_strict(_monitor_fields(fields)).decode()
                conn.execute(table.update().where(table.c.uid == uid).values(monitoring=text))
            if state is None:
                return
            parts = self._partitions
            key = (parts.c.source == source) & (parts.c.partition == partition)
            text = orjson.dumps(state).decode()
            if conn.execute(parts.update().where(key).values(state=text)).rowcount == 0:
                conn.execute(parts.insert().values(source=source, partition=partition, state=text))

    def partition_state(self, source: str, partition: int) -> dict[str, Any] | None:
        import orjson

        parts = self._partitions
        key = (parts.c.source == source) & (parts.c.partition == partition)
        with self._engine.connect() as conn:
            text = conn.execute(self._sa.select(parts.c.state).where(key)).scalar()
        return None if text is None else dict(orjson.loads(text))

    def get(self, uid: str) -> ModelEndpoint | None:
        rows = self._select(self._table.c.uid == uid)
        return rows[0] if rows else None

    def list(self, project: str | None = None) -> list[ModelEndpoint]:
        return self._select(None if project is None else self._table.c.project == project)

    def _select(self, where: Any) -> builtins.list[ModelEndpoint]:  # (list: a method here)
        query = self._sa.select(self._table).order_by(self._table.c.project, self._table.c.uid)
        if where is not None:
            query = query.where(where)
        with self._engine.connect() as conn:
            return [_from_row(row) for row in conn.execute(query)]

    def close(self) -> None:
        self._engine.dispose()


def _stamp(when: datetime) -> str:
    """UTC ISO text of fixed width, so the database orders stamps as text."""
    return str(when.astimezone(UTC).isoformat(timespec="microseconds"))


def _monitor_fields(fields: dict[str, Any]) -> dict[str, Any]:
    unknown = set(fields) - set(MONITOR_FIELDS)
    if unknown:
        raise ValueError(f"not a monitor field: {sorted(unknown)} (known: {MONITOR_FIELDS})")
    return fields


def _from_row(row: Any) -> ModelEndpoint:
    import orjson

    endpoint = ModelEndpoint.model_validate_json(row.record)
    counts = None
    if row.first_request:
        counts = RequestCounts(
            datetime.fromisoformat(row.first_request),
            datetime.fromisoformat(row.last_request),
            row.requests,
            row.error_count,
        )
    shadow = {name: getattr(row, f"shadow_{name}") or 0 for name in SHADOW_RESULTS}
    endpoint = _with_counts(endpoint, counts, shadow)
    return _with_monitoring(endpoint, orjson.loads(row.monitoring) if row.monitoring else None)
