"""Models validate what crosses boundaries and give every job attempt one stable incident id."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from goodput.identifiers import InvalidIdentifierError, validate_node_name, validate_reason
from goodput.models import MAX_EVIDENCE_LINE, Anomaly, IncidentKey

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def make(**fields: object) -> Anomaly:
    base: dict[str, object] = {"id": "a1", "source": "log", "kind": "crash", "job_id": "42",
                               "observed_at": NOW, "detected_at": NOW}
    return Anomaly.model_validate({**base, **fields})


@pytest.mark.parametrize("name", ["node1;rm -rf /", "node1\nnode2", "x" * 10_000, "", "-rf",
                                  "$(reboot)", "node 1", "../etc"])
def test_hostile_node_names_are_rejected(name: str) -> None:
    with pytest.raises(InvalidIdentifierError):
        validate_node_name(name)
    with pytest.raises(ValidationError):
        make(nodes=[name])


@pytest.mark.parametrize("job_id", ["42;id", "42 43", "abc", "", "1" * 40])
def test_hostile_job_ids_are_rejected(job_id: str) -> None:
    with pytest.raises(ValidationError):
        make(job_id=job_id)


@pytest.mark.parametrize("job_id", ["42", "123_4", "77+1"])
def test_slurm_job_id_forms_are_accepted(job_id: str) -> None:
    assert make(job_id=job_id).job_id == job_id


def test_reason_must_be_one_printable_line() -> None:
    with pytest.raises(InvalidIdentifierError):
        validate_reason("xid 79\nrm -rf /")
    assert validate_reason("xid 79 on GPU 3") == "xid 79 on GPU 3"


def test_huge_evidence_is_clipped_not_rejected() -> None:
    a = make(evidence=["A" * 1_000_000, *["line"] * 1000])
    assert len(a.evidence) == 200
    assert len(a.evidence[0]) < MAX_EVIDENCE_LINE + 20
    assert a.evidence[0].endswith("[truncated]")


def test_models_are_frozen() -> None:
    with pytest.raises(ValidationError):
        make().job_id = "43"  # type: ignore[misc]


def test_incident_key_is_per_job_attempt_and_safe() -> None:
    a, b = make(job_attempt=0), make(job_attempt=0, id="a2")
    assert a.incident_key.workflow_id == b.incident_key.workflow_id
    assert make(job_attempt=1).incident_key.workflow_id != a.incident_key.workflow_id
    # Different clusters whose names sanitise alike still get different ids.
    k1 = IncidentKey(cluster="a.b", job_id="1", job_attempt=0)
    k2 = IncidentKey(cluster="a_b", job_id="1", job_attempt=0)
    assert k1.workflow_id != k2.workflow_id
    assert k1.workflow_id.startswith("incident-a.b-1-0-")


def test_unknown_fields_from_newer_senders_are_ignored() -> None:
    assert make(some_future_field=1).job_id == "42"
