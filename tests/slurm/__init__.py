"""Tests against real Slurm: the lab fixture, the backend contract suite and the recovery scenario."""
