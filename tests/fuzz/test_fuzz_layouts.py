"""Hostile layout records and reservation records, the two parsers the prolog and the hot-spare pool added.

A layout record reaches the push endpoint from every compute node's prolog (`POST /v1/layout`):
authenticated, but a node is not goodput, and a body may be anything. A reservation record is
`scontrol show reservation` output goodput writes back when it refills the pool. Either parses,
or is refused with its typed error and a message; the stored layout always names a node of its
own node list, and a parsed pool's nodes are always names goodput would accept.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.detect.push import PushConfig
from goodput.detect.push.layout import LayoutBodyError, node_layout, parse_layout
from goodput.identifiers import validate_node_name
from goodput.scheduler import SchedulerError
from goodput.slurm.reservations import parse_reservation
from tests.fuzz.harness import rejects_cleanly

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

CONFIG = PushConfig(enabled=True, tokens=("t" * 32,))
AT = datetime(2026, 12, 1, tzinfo=UTC)
# Mostly well-formed, so most examples get past the schema to the placing and the checks behind it.
names = st.one_of(st.sampled_from(["node1", "node2", "node3", "gpu-a17"]), st.text(max_size=20))
nodelists = st.one_of(st.sampled_from(["node[1-4]", "node[1-3,7]", "node1,node2", "gpu-a[10-17]", "node2"]),
                      st.text(max_size=20))
gpus = st.lists(st.fixed_dictionaries({"index": st.one_of(st.integers(0, 7), st.integers(-2, 1100))}, optional={
    "pci_bus_id": st.one_of(st.just("00000000:3B:00.0"), st.text(max_size=20)),
    "uuid": st.one_of(st.just("GPU-1a2b3c4d-0000-1111-2222-333344445555"), st.text(max_size=70)),
    "serial": st.one_of(st.just("1652020012345"), st.text(max_size=70))}), max_size=6, unique_by=lambda g: g["index"])
records = st.fixed_dictionaries({
    "version": st.sampled_from([1, 1, 1, 2, "1"]), "event": st.sampled_from(["prolog", "epilog", "prolog", "x"]),
    "job_id": st.one_of(st.integers(0, 10**12).map(str), st.text(max_size=12)),
    "node": names, "nodelist": nodelists,
    "gpus": gpus, "check": st.fixed_dictionaries({"status": st.sampled_from(["ok", "failed", "skipped", "?"]),
                                                  "detail": st.text(max_size=400)}),
}, optional={"cluster": st.sampled_from(["lab", "other", "", "x" * 200]), "restart_count": st.integers(-1, 10**10),
             "extra": st.none()})
bodies = st.one_of(records.map(lambda r: json.dumps(r).encode()), st.binary(max_size=300))


@given(bodies)
def test_layout_records(body: bytes) -> None:
    parsed = rejects_cleanly("layout-record", lambda: parse_layout(body, CONFIG, cluster="lab"), (LayoutBodyError,))
    if parsed is None:
        return
    _, record = parsed
    layout = rejects_cleanly("layout-record-place", lambda: node_layout(record, AT), (LayoutBodyError,))
    if layout is not None:
        assert 0 <= layout.node_index < layout.node_count and layout.node == record.node


tokens = st.one_of(st.sampled_from(["ReservationName=goodput-spares", "Nodes=node[1,4]", "Nodes=(null)",
                                    "Users=root,alice", "Flags=FLEX,SPEC_NODES", "StartTime=2026-12-01T00:00:00",
                                    "Nodes=node[1-99999999]", "Users=", "ReservationName=other",
                                    "Nodes=node[1-4]", "Flags=FLEX"]),
                   st.text(max_size=40))


@given(st.lists(tokens, max_size=8).map(" ".join), st.booleans(), st.sampled_from(["goodput-spares", "pool"]))
def test_reservation_records(rest: str, named: bool, name: str) -> None:
    line = f"ReservationName={name} {rest}" if named else rest
    info = rejects_cleanly("slurm-reservation", lambda: parse_reservation(line, name), (SchedulerError,))
    if info is not None:
        assert info.name == name
        for node in info.nodes:
            validate_node_name(node)
