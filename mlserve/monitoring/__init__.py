"""Monitoring: the model-log stream, endpoint records and Prometheus metrics."""
