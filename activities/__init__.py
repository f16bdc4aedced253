"""Temporal activities: thin adapters from workflows to the scheduler, probes and notifiers."""
