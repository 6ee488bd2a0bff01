"""The ground floor every layer stands on (docs/architecture.md#layers): the event and
response types, the loop/thread hand-off, limits and what enforces them (the per-model
gate, the inline rule, deadlines), handler marks, the graph context, call statistics,
the recorder a model reports to, clocks, the faces' settings and sockets.

Nothing here imports a layer above it; ``protocol`` (pure codecs and error classes) is
the only mlserve package it uses."""
