"""libibverbs' completion statuses as data: the table names its source, no status alone drains a
node, a refused access is not restarted, UCX's words count only with their syndrome, and an
inconsistent row is refused. Every status in every spelling: `test_vendor_code_tables`."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.diagnose.signatures.readings import parse_code_table
from goodput.diagnose.signatures.verbs_status import WcStatus, load_table

CAT = default_catalogue()
TABLE = load_table()
STATUSES = TABLE.rows


def test_the_table_names_its_source_and_drains_nothing() -> None:
    assert TABLE.url.startswith("https://github.com/linux-rdma/rdma-core")
    generated = [s for s in CAT.signatures if s.id.startswith("ibv-wc-")]
    assert len(generated) == sum(1 for s in STATUSES if not s.signature) >= 10
    assert all("ibv_poll_cq" in s.source and "IBV_WC_" in s.source for s in generated)
    assert not any(s.drain for s in generated)


def test_a_refused_remote_access_is_configuration_and_not_restarted() -> None:
    # Before the table, every status but five was NCCL's generic completion error, restarted.
    v = classify_lines(["h1:7:9 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4000> with status=10 "
                        "opcode=1 len=0 vendor err 136 (Recv)"])
    assert (str(v.category), v.restart, v.drain) == ("network", False, False)
    assert "ibv-wc-10" in v.signatures


def test_a_ucx_syndrome_must_match_its_words() -> None:
    # UCX's words and the syndrome go together; words with another status's syndrome are not read.
    line = "Remote access on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)"
    assert "ibv-wc-10" not in {m.signature.id for m in CAT.match_line(line, 1)}


def test_an_inconsistent_row_is_refused() -> None:
    doc = {"source": {"document": "d", "url": "u", "version": "v"},
           "reading": {"r": {"category": "network", "culprit_kind": "network", "precedence": 1, "restart": True,
                             "drain": False, "settles": False, "because": "b"}},
           "status": [{"code": 7, "name": "IBV_WC_BAD_RESP_ERR", "message": "bad response error",
                       "syndrome": 16, "reading": "r", "meaning": "m"}]}
    with pytest.raises(ValueError, match="go together"):
        parse_code_table(doc, WcStatus, "status")
    doc["status"][0].update(ucx="Bad response", reading="nope")
    with pytest.raises(ValueError, match="no weighing"):
        parse_code_table(doc, WcStatus, "status")
