"""Stores of endpoint records: in memory, or any SQLAlchemy database.

SQLite at ``<data dir>/endpoints.db`` is the default; PostgreSQL (or any
SQLAlchemy URL) comes from the ``endpoint_store_url`` function parameter or
the ``MLSERVE_ENDPOINT_STORE`` environment variable. The uid is the primary
key, so a restart or a second replica never duplicates a record; request
counters are updated in place by one UPDATE, never read-modify-written.
"""

from __future__ import annotations

import builtins
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlserve.monitoring.endpoints import ModelEndpoint, RequestCounts

__all__ = ["MemoryEndpointStore", "SQLEndpointStore", "data_dir", "default_store_url", "open_store"]

MEMORY_URL = "memory://"


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


def _with_counts(endpoint: ModelEndpoint, counts: RequestCounts | None) -> ModelEndpoint:
    endpoint = endpoint.model_copy(deep=True)
    if counts is not None:
        endpoint.status.first_request = counts.first
        endpoint.status.last_request = counts.last
        endpoint.status.error_count = counts.errors
        endpoint.status.metrics["requests"] = counts.requests
    return endpoint


class MemoryEndpointStore:
    """Records in a dict: for the mock server and tests."""

    def __init__(self) -> None:
        self._records: dict[str, ModelEndpoint] = {}
        self._counts: dict[str, RequestCounts] = {}

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

    def get(self, uid: str) -> ModelEndpoint | None:
        record = self._records.get(uid)
        return None if record is None else _with_counts(record, self._counts.get(uid))

    def list(self, project: str | None = None) -> list[ModelEndpoint]:
        return [
            _with_counts(r, self._counts.get(uid))
            for uid, r in self._records.items()
            if project is None or r.metadata.project == project
        ]

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
        )
        metadata.create_all(self._engine)

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


def _from_row(row: Any) -> ModelEndpoint:
    endpoint = ModelEndpoint.model_validate_json(row.record)
    if row.first_request:
        counts = RequestCounts(
            datetime.fromisoformat(row.first_request),
            datetime.fromisoformat(row.last_request),
            row.requests,
            row.error_count,
        )
        return _with_counts(endpoint, counts)
    return endpoint
