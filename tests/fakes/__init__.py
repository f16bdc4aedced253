"""Test-only stand-ins for external systems: a recording notifier, a fake GPU probe, an in-memory
filesystem for checkpoint trees, and a pyslurm stand-in. They never ship (not in the wheel)."""
