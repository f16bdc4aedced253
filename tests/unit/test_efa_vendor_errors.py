"""The EFA provider's error codes as data: every code in `data/vendor/efa-errors.toml` reaches its
reading whichever way a log spells it (the OFI plugin's `Error: <code> (<message>`, the code's name,
a long message alone), a short message is never read without its code, and no code drains."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.diagnose.signatures.efa_errors import DISTINCT_MESSAGE, EfaError, load_table
from goodput.diagnose.signatures.readings import parse_code_table
from tests.unit.vendor_table_checks import assert_reaches_reading, own_rules_disagreeing, spelling_cases

CAT = default_catalogue()
TABLE = load_table()
BY_ID = {s.id: s for s in CAT.signatures}
ERRORS = TABLE.rows


def forms(error: EfaError) -> dict[str, str]:
    out = {
        "aws-ofi-nccl": (f"[2026-01-01 12:08:32] node-0-0:194:710 [0] int cm_req_handle_error_entry(...):46 NCCL WARN "
                         f"NET/OFI Request 0x7f456c222f60 completed with error. RC: 103. Error: {error.code} "
                         f"({error.message}) My EFA addr: fi_addr_efa://[fe80::c55:2eff:fe44:db5]:0:142160333"),
        "name": f"libfabric:4242:1700000000::efa:cq:efa_cq_handle_error(): prov_errno {error.name}",
    }
    if len(error.message) >= DISTINCT_MESSAGE:
        out["message"] = f"rank 3: transfer failed: {error.message}"
    return out


CASES = spelling_cases(ERRORS, forms)


@pytest.mark.parametrize(("error", "form", "line"), CASES, ids=[f"{e.code}-{f}" for e, f, _ in CASES])
def test_every_code_reaches_its_reading_in_every_spelling(error: EfaError, form: str, line: str) -> None:
    assert_reaches_reading(CAT, TABLE, error, "efa-error", form, line)


def test_a_rule_of_its_own_agrees_with_the_reading() -> None:
    assert own_rules_disagreeing(CAT, TABLE) == []


def test_a_short_message_needs_its_code() -> None:
    # "Message too long" is a phrase of many programs; only the OFI plugin's `Error: 6 (` makes it EFA's.
    assert "efa-error-6" not in {m.signature.id for m in CAT.match_line("ValueError: Message too long", 1)}
    assert "efa-error-6" not in {m.signature.id for m in CAT.match_line("Error: 7 (Message too long)", 1)}


def test_the_table_names_its_source_and_drains_nothing() -> None:
    assert TABLE.url.startswith("https://github.com/ofiwg/libfabric")
    generated = [s for s in CAT.signatures if s.id.startswith("efa-error-")]
    assert len(generated) == sum(1 for e in ERRORS if not e.signature) >= 8
    assert not any(s.drain for s in generated)


def test_a_refused_registration_is_configuration_where_the_generic_ofi_error_restarted() -> None:
    line = ("NCCL WARN NET/OFI Request 0x7f completed with error. RC: 103. Error: 5 (Local memory registration is "
            "invalid, has insufficient access flags or does not match IOVA)")
    v = classify_lines([line])
    assert (str(v.category), v.restart, v.drain) == ("network", False, False)
    assert "nccl-ofi-error" not in v.signatures


def test_an_unweighed_reading_is_refused() -> None:
    doc = {"source": {"document": "d", "url": "u", "version": "v"}, "reading": {},
           "error": [{"code": 6, "name": "EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH", "message": "Message too long",
                      "reading": "efa-config", "meaning": "m"}]}
    with pytest.raises(ValueError, match="no weighing"):
        parse_code_table(doc, EfaError, "error")
