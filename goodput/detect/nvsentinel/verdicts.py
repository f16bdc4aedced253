"""goodput's verdicts, as events for NVSentinel (push-back).

The other direction: the nodes goodput drained, and why, as STORE_ONLY health events that
NVSentinel stores and shows, and by its own rules never acts on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from goodput.detect.nvsentinel.events import HealthEvent
from goodput.detect.nvsentinel.wire import MAX_LIST, Entity, ProcessingStrategy, RecommendedAction
from goodput.models import Category


def verdict_event(*, node: str, incident_id: str, explanation: str, agent: str, now: datetime,
                  category: Category | None = None, gpus: Sequence[str] = ()) -> HealthEvent:
    """goodput's attribution of a failure to `node` (it drained the node), as a STORE_ONLY health
    event: NVSentinel stores and shows it, and by its own rules never cordons, drains or remediates
    for it. Not fatal and nothing recommended, so goodput's own receivers ignore it if it comes back."""
    entities = [Entity(entity_type="GPU_UUID" if g.startswith(("GPU-", "MIG-")) else "PCI", entity_value=g)
                for g in gpus[:MAX_LIST] if ":gpu" not in g]
    hardware = category in {Category.GPU_HARDWARE, Category.NVLINK}
    return HealthEvent(version=1, agent=agent, component_class="GPU" if hardware else "Node",
                       check_name=f"goodput-{category.value}" if category else "goodput-drain",
                       is_fatal=False, is_healthy=False, message=f"goodput incident {incident_id}: {explanation}",
                       recommended_action=RecommendedAction.NONE, error_code=(category.value,) if category else (),
                       entities_impacted=tuple(entities), generated_timestamp=now, node_name=node,
                       processing_strategy=ProcessingStrategy.STORE_ONLY)
