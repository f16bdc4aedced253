"""`high` confidence means a vendor rule and the log settle the verdict (issue #25, item 5).

The live policy is to act on its own only on `high` verdicts, so `high` must be earned: the deciding
rule carries a documented `source`, the culprit is named as specifically as the decision needs (a
drain needs a host), and the evidence does not leave the failing side open (a completion error seen
from one end of a link). These tests walk the whole catalogue and pin each condition.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.diagnose.signatures.confidence import Confidence, Ingredients, grade
from goodput.diagnose.signatures.model import Match, Role
from goodput.diagnose.signatures.verdict import VerdictBuilder
from goodput.models import Category, CulpritKind

# Every named group a culprit can be read from, filled: the most a single line can name.
_NAMED = {"host": "gpu-b17", "rank": "3", "pci": "0000:9a:00.0", "peer": "gpu-b18", "path": "/ckpt/x"}


def _best_case(sig_id: str) -> Confidence:
    """The grade of a log whose only line is this signature's, naming everything it can."""
    sig = default_catalogue().get(sig_id)
    assert sig is not None
    builder = VerdictBuilder(default_catalogue().version)
    builder.add(Match(signature=sig, line_no=1, text="x", groups=dict(_NAMED)))
    return builder.build().confidence


def test_every_signature_that_can_yield_high_carries_a_source() -> None:
    reach_high = []
    for sig in default_catalogue().signatures:
        if sig.role is Role.LOCATOR:
            continue
        if _best_case(sig.id) is Confidence.HIGH:
            reach_high.append(sig.id)
            assert sig.source, f"{sig.id} can yield a high verdict but names no documented source"
    # Not vacuous: vendor-sourced rules (the Xid catalogue, verbs completion codes) still reach high.
    assert len(reach_high) >= 20, reach_high


def _facts(**changes: object) -> Ingredients:
    base: dict[str, object] = dict(
        category=Category.GPU_HARDWARE, culprit_kind=CulpritKind.GPU, culprit_named=True,
        from_source_node=False, root_cause=True, any_hit=True, rival=None, sourced=True)
    base.update(changes)
    return Ingredients(**base)  # type: ignore[arg-type]


def test_a_settled_sourced_verdict_is_high() -> None:
    assert grade(_facts()) == (Confidence.HIGH, None)
    # Slurm ending a job on purpose (preemption, cancel) names no culprit and needs none.
    assert grade(_facts(category=Category.SCHEDULER_POLICY, culprit_kind=CulpritKind.UNKNOWN,
                        culprit_named=False)) == (Confidence.HIGH, None)


def test_only_settling_rules_are_marked_unsettled() -> None:
    unsettled = {s.id for s in default_catalogue().signatures if not s.settles}
    assert {"slurm-time-limit", "slurm-state-timeout", "slurm-gres-count-low"} <= unsettled
    assert all(default_catalogue().get(i).source for i in unsettled)  # type: ignore[union-attr]


@pytest.mark.parametrize(("changes", "mentions"), [
    ({"sourced": False}, "vendor document"),
    ({"drain_unplaced": True}, "watcher or push"),
    ({"category": Category.NETWORK, "culprit_kind": CulpritKind.NETWORK}, "other end"),
    # A stall names where the job stopped, never why.
    ({"category": Category.HANG, "culprit_kind": CulpritKind.RANK}, "not why"),
    ({"category": Category.NCCL_TIMEOUT, "culprit_kind": CulpritKind.RANK}, "not why"),
    # A kind of failure without what failed (a rendezvous that timed out, a job state of BOOT_FAIL).
    ({"category": Category.NODE_FAILURE, "culprit_kind": CulpritKind.UNKNOWN, "culprit_named": False},
     "not what failed"),
    # A documented fact that does not settle the verdict (`settles = false`: a time limit reached).
    ({"category": Category.SCHEDULER_POLICY, "culprit_kind": CulpritKind.APP, "unsettled": True},
     "does not settle"),
])
def test_what_keeps_a_verdict_below_high(changes: dict[str, object], mentions: str) -> None:
    confidence, settle = grade(_facts(**changes))
    assert confidence is Confidence.MEDIUM
    assert settle is not None and mentions in settle


XID = "Nov 29 07:41:02 {h}kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize(("log", "confidence", "mentions"), [
    # NVIDIA's catalogue decides Xid 79 and the line names host and GPU: settled.
    ([XID.format(h="gpu-b17 ")], Confidence.HIGH, None),
    # The same line without its syslog host: the drain's target is whoever produced the log.
    ([XID.format(h="")], Confidence.MEDIUM, "watcher or push"),
    # A Python traceback's last line names no documented meaning: how threads usually read it.
    (["[rank3]: Traceback (most recent call last):", "[rank3]: ValueError: bad shape"],
     Confidence.MEDIUM, "vendor document"),
    # ibv_poll_cq(3)'s retry-exceeded from one end: the peer did not answer, which end failed is open.
    (["gpu-b17:1:2 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
      "10.0.0.2<4242> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 "
      "remoteGidsfe80::1 hca mlx5_0"], Confidence.MEDIUM, "other end"),
])
def test_confidence_of_small_logs(log: list[str], confidence: Confidence, mentions: str | None) -> None:
    v = classify_lines(log)
    assert v.confidence is confidence, (v.confidence, v.settle, v.explanation)
    assert (v.settle is None) if mentions is None else (v.settle is not None and mentions in v.settle)
