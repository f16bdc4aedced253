"""Stages 3 to 5 of the loop, **isolate → resume → verify**: the decisions, never the effects.

`policy` plans an incident's recovery from its attribution (modes, blast radius, retry budget);
`breaker` rations drains per cluster; `lifecycle` is the incident's state machine; `incident`
holds the shapes the recovery workflow and its activities exchange, and the incident report;
`notify` is the Notifier seam. The effects themselves (drain, requeue, resubmit, verify) are
activities in `activities/`, orchestrated by `workflows/recovery.py`; checkpoint choice lives in
`goodput.checkpoints` and Slurm knowledge in `goodput.slurm`.
"""
