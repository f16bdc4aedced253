"""What a running goodput offers its operators' tools: the incident service seam and its views.

The CLI (`goodput.cli`) and the web console (`goodput.console`, `workers.console`) both read
incidents through `IncidentService` and show node faults grouped the same way; both depend on
this package and never on each other, and no stage (detect, diagnose, recover, checkpoints)
depends on either of them. Pure: the Temporal-backed implementation is `workers.client`'s.
"""
