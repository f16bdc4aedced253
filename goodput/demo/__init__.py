"""The demo cluster `goodput up` runs on when no Slurm is configured: an in-memory (or JSON-file)
scheduler with eight nodes and three training jobs that keeps every real backend's rules.

It ships with goodput because `make up` needs it; stand-ins used only by tests live in `tests/fakes/`.
"""
