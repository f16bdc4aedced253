"""Reproducible performance measurements; each module runs with `python -m benchmarks.<name>`."""
