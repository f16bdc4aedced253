"""Exclude before drain: a drain needs the node's own word, not only one job's log.

A job's log that names a node (an Xid line, a "GPU has fallen off the bus" on host X) says the
job failed there; it does not say the node will fail the next job. Draining on it alone takes good
nodes out for everyone whenever a log misleads (the most common complaint about node-health
automation). So a drain needs a second, independent signal from the node itself: the node agent's
NVML/DCGM health or kernel-log Xid on it, NVSentinel's event on it, Slurm's own view of it, or
other jobs' incidents on it in the cluster's node memory, or the site's health probe run on
request (`probe_command`: `nvidia-smi -q` ECC / row-remap / retired pages, `dcgmi diag -r 1`)
failing on it. Without one, the plan requeues the job
with the node excluded for that job only (its ExcNodeList) and marks the node suspect in node
memory, where the next job's failure on it will be the second signal.

Pure: the recovery workflow gathers what it knows (the incident's anomalies, the memory's verdict)
and asks `corroborate` which of the attribution's nodes may be drained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum

from pydantic import Field

from goodput.diagnose.node_memory import MemoryVerdict
from goodput.models import Anomaly, AnomalySource, Attribution, Frozen
from goodput.recover.node_health import CheckResult


class ExcludeBeforeDrainPolicy(Frozen):
    """`[policy.exclude_before_drain]`: whether a drain needs a second, independent signal."""

    enabled: bool = True
    # The site's health probe for a node only the job's log blames, run on request before deciding
    # (`{node}` is replaced by the node's name), e.g. ["ssh", "{node}", "dcgmi", "diag", "-r", "1"];
    # its failure is the node's own signal. Empty: no probe.
    probe_command: tuple[str, ...] = Field(default=(), max_length=64)
    probe_timeout_s: float = Field(default=120.0, gt=0.0, le=3600.0)


class Signal(StrEnum):
    """An independent source of evidence about one node."""

    JOB_LOG = "job-log"  # the failed job's own output named it
    NODE_AGENT = "node-agent"  # the node's GPUs: NVML/DCGM health, kernel-log Xid, NVSentinel
    SCHEDULER = "scheduler"  # Slurm says the node failed (NODE_FAIL, not responding)
    NODE_MEMORY = "node-memory"  # other jobs' incidents implicated it
    HEALTH_PROBE = "health-probe"  # the site's probe, run on request, failed on it
    OPERATOR = "operator"  # an operator's `goodput inject` named it: their word, not job output


# Anomaly sources that speak for the node itself rather than for the job that ran on it.
_NODE_OWN: Mapping[AnomalySource, Signal] = {
    AnomalySource.GPU: Signal.NODE_AGENT,
    AnomalySource.SCHEDULER: Signal.SCHEDULER,
}
# An operator is trusted (docs/security.md, threat model; attribution's TRUSTED_NODE_SOURCES):
# an injected anomaly naming a node is their word, independent of the job's log.
_OPERATOR_WORD: Mapping[AnomalySource, Signal] = {**_NODE_OWN, AnomalySource.OPERATOR: Signal.OPERATOR}


class Corroboration(Frozen):
    """Which blamed nodes may be drained, which only excluded, and the signals found per node."""

    drain: tuple[str, ...] = ()
    suspect: tuple[str, ...] = ()
    signals: dict[str, tuple[Signal, ...]] = {}

    def described(self, node: str) -> str:
        return ", ".join(self.signals.get(node, ())) or "none"


def node_signals(node: str, anomalies: Sequence[Anomaly], memory: MemoryVerdict | None,
                 probes: Mapping[str, CheckResult] | None = None, *, operator_word: bool = True) -> tuple[Signal, ...]:
    """Every independent signal that implicates `node`, the job's log first. `operator_word`
    False: an operator's injection reads as a job-log line (incidents from before the patch)."""
    sources = _OPERATOR_WORD if operator_word else _NODE_OWN
    found: list[Signal] = []
    for anomaly in anomalies:
        if node not in anomaly.nodes:
            continue
        signal = sources.get(anomaly.source, Signal.JOB_LOG)
        if signal not in found:
            found.append(signal)
    if memory is not None and (node in memory.witnessed or any(s.node == node for s in memory.suspects)):
        found.append(Signal.NODE_MEMORY)
    probe = (probes or {}).get(node)
    if probe is not None and probe.ran and not probe.passed:  # a probe that could not run says nothing
        found.append(Signal.HEALTH_PROBE)
    return tuple(sorted(found, key=list(Signal).index))


def corroborate(attribution: Attribution, anomalies: Sequence[Anomaly], memory: MemoryVerdict | None,
                probes: Mapping[str, CheckResult] | None = None, *, operator_word: bool = True) -> Corroboration:
    """Splits the nodes the attribution would drain: a node with at least one signal of its own
    (anything but the job's log) is drained; a node only the job's log names is a suspect."""
    if not attribution.drain:
        return Corroboration()
    nodes = tuple(dict.fromkeys(attribution.culprit_nodes))
    signals = {n: node_signals(n, anomalies, memory, probes, operator_word=operator_word) for n in nodes}
    drain = tuple(n for n in nodes if any(s is not Signal.JOB_LOG for s in signals[n]))
    suspect = tuple(n for n in nodes if n not in drain)
    return Corroboration(drain=drain, suspect=suspect, signals=signals)
