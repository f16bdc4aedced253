"""RecoveryWorkflow's shape: one class, every handler documented, the names Temporal sees unchanged."""

from __future__ import annotations

from temporalio import workflow

from workflows.recovery import RecoveryWorkflow

DEFINITION = workflow._Definition.must_from_class(RecoveryWorkflow)


def test_the_names_temporal_sees_are_those_recorded_histories_and_clients_use() -> None:
    assert DEFINITION.name == "RecoveryWorkflow"
    # `anomalies`: a sink's folded batch (#29), additive beside `anomaly`
    assert set(DEFINITION.signals) == {"anomaly", "anomalies", "approve", "cancel", "node_decision"}
    assert set(DEFINITION.queries) == {"report", "state", "plan", "log_marks"}
    assert set(DEFINITION.updates) == {"decide"}


def test_it_is_one_class_with_no_mixins() -> None:
    assert RecoveryWorkflow.__bases__ == (object,)


def test_every_signal_query_and_update_handler_says_what_it_does() -> None:
    handlers = [*DEFINITION.signals.values(), *DEFINITION.queries.values(), *DEFINITION.updates.values()]
    undocumented = [h.name for h in handlers if not (h.fn.__doc__ or "").strip()]
    assert undocumented == []
    decide = DEFINITION.updates["decide"]
    assert decide.validator is not None and (decide.validator.__doc__ or "").strip()
