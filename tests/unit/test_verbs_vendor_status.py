"""libibverbs' completion statuses as data: every status in `data/vendor/ibv-wc-status.toml`
reaches its documented reading whichever way a log spells it (NCCL's number, the status's name,
UCX's words for the mlx5 syndrome), and no status alone drains a node."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.diagnose.signatures.readings import parse_code_table
from goodput.diagnose.signatures.verbs_status import WcStatus, load_table
from tests.unit.vendor_table_checks import assert_reaches_reading, own_rules_disagreeing, spelling_cases

CAT = default_catalogue()
TABLE = load_table()
BY_ID = {s.id: s for s in CAT.signatures}
STATUSES = TABLE.rows


def forms(status: WcStatus) -> dict[str, str]:
    out = {
        "nccl": (f"gpu-a12:4121:4188 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
                 f"10.3.0.17<52113> with status={status.code} opcode=1 len=0 vendor err 129 (Send) localGid "
                 "::ffff:10.3.0.12 remoteGids::ffff:10.3.0.17 hca mlx5_4"),
        "nccl-old": (f"gpu-a12:4121:4188 [3] NCCL WARN NET/IB : Got completion with error {status.code}, "
                     "opcode 1, len 0, vendor err 129"),
        "name": f"rdma_poll: completion failed: {status.name} (wr_id 17)",
        "ucx-verbs": (f"[clx-orion-097:26451:0:26451] rc_verbs_iface.c:63   FATAL: send completion with error: "
                      f"{status.message}"),
    }
    if status.ucx and status.syndrome is not None:
        out["ucx"] = (f"[cn12:2811:0:2840] ib_mlx5_log.c:171  {status.ucx} on mlx5_0:1/IB "
                      f"(synd 0x{status.syndrome:x} vend 0x81 hw_synd 0/0)")
    return out


CASES = spelling_cases(STATUSES, forms)


@pytest.mark.parametrize(("status", "form", "line"), CASES, ids=[f"{s.name}-{f}" for s, f, _ in CASES])
def test_every_status_reaches_its_reading_in_every_spelling(status: WcStatus, form: str, line: str) -> None:
    assert_reaches_reading(CAT, TABLE, status, "ibv-wc", form, line)


def test_a_rule_of_its_own_agrees_with_the_reading() -> None:
    assert own_rules_disagreeing(CAT, TABLE) == []


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
