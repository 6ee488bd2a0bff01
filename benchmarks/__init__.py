"""mlserve's benchmarks against its peers: ``python -m benchmarks`` (``make bench``) runs
every step and writes docs/performance.md; ``python -m benchmarks.<step>`` runs one."""
