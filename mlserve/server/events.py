"""The request and response types under their first import path, which mlrun users'
code and its port (``MockTrigger`` -> ``mlserve.server.events.Trigger``) import; they
live in ``mlserve.core.events`` (docs/architecture.md#layers)."""

from mlserve.core.events import HTTP_TRIGGERS, Event, MockEvent, Response, Trigger

__all__ = ["HTTP_TRIGGERS", "Event", "MockEvent", "Response", "Trigger"]
