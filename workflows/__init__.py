"""Temporal workflows: deterministic orchestration of the recovery loop."""
