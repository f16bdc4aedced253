"""The EFA provider's error codes as data: a short message is never read without its code, the
table names its source, no code drains, a refused registration is not restarted, and an unweighed
reading is refused. Every code in every spelling: `test_vendor_code_tables`."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.diagnose.signatures.efa_errors import EfaError, load_table
from goodput.diagnose.signatures.readings import parse_code_table

CAT = default_catalogue()
TABLE = load_table()
ERRORS = TABLE.rows


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
