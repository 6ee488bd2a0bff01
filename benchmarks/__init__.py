"""The load benchmark of the HTTP hot path: ``python -m benchmarks.run`` (``make bench``)."""
