"""The incident list's filters, as a URL: a saved view is a bookmark, and a filter never reaches
the visibility query unvalidated.

Every value comes from a query string anyone with a link can edit, and ends up inside a Temporal
visibility query; each is therefore checked against a closed vocabulary (states, modes,
categories) or the identifier grammar goodput already enforces for clusters, nodes and job ids,
so no filter can widen the query it is part of. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from urllib.parse import urlencode

from pydantic import Field, ValidationError

from goodput.identifiers import (
    InvalidIdentifierError,
    validate_cluster,
    validate_job_id,
    validate_node_name,
    validate_partition,
)
from goodput.models import Category, Frozen, Mode
from goodput.recover.audit import parse_since
from goodput.recover.lifecycle import IncidentState

PAGE_SIZES = (25, 50, 100, 200)


class FilterError(ValueError):
    """A filter value outside its vocabulary: shown to the operator, never sent to Temporal."""


class IncidentFilter(Frozen):
    state: IncidentState | None = None
    mode: Mode | None = None
    category: Category | None = None
    cluster: str | None = None
    partition: str | None = None
    node: str | None = None
    job: str | None = None
    since: str | None = Field(default=None, max_length=40)
    open_only: bool = False
    page_size: int = 50

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> IncidentFilter:
        raw = {k: v.strip() for k, v in params.items() if isinstance(v, str) and v.strip()}
        try:
            values: dict[str, object] = {
                "state": IncidentState(raw["state"]) if "state" in raw else None,
                "mode": Mode(raw["mode"]) if "mode" in raw else None,
                "category": Category(raw["category"]) if "category" in raw else None,
                "cluster": validate_cluster(raw["cluster"]) if "cluster" in raw else None,
                "partition": validate_partition(raw["partition"]) if "partition" in raw else None,
                "node": validate_node_name(raw["node"]) if "node" in raw else None,
                "job": validate_job_id(raw["job"]) if "job" in raw else None,
                "since": raw.get("since"),
                "open_only": raw.get("open") in ("1", "true", "on"),
                "page_size": int(raw.get("page_size", "50")),
            }
        except (ValueError, InvalidIdentifierError) as err:
            raise FilterError(f"bad filter: {err}") from err
        if values["page_size"] not in PAGE_SIZES:
            raise FilterError(f"page_size must be one of {', '.join(map(str, PAGE_SIZES))}")
        try:
            made = cls.model_validate(values)
        except ValidationError as err:
            raise FilterError(f"bad filter: {err.errors()[0]['msg']}") from err
        made.start(datetime.now().astimezone())  # reject a bad `since` now, not at query time
        return made

    def start(self, now: datetime) -> datetime | None:
        if self.since is None:
            return None
        try:
            return parse_since(self.since, now)
        except ValueError as err:
            raise FilterError(f"bad since: {err}") from err

    def as_params(self, **override: object) -> str:
        """This view as a query string (a saved view), with some values replaced."""
        values: dict[str, object] = {
            "state": self.state, "mode": self.mode, "category": self.category, "cluster": self.cluster,
            "partition": self.partition, "node": self.node, "job": self.job, "since": self.since,
            "open": "1" if self.open_only else None,
            "page_size": self.page_size if self.page_size != 50 else None, **override}
        return urlencode({k: str(v) for k, v in values.items() if v not in (None, "")})

    def is_empty(self) -> bool:
        return self == IncidentFilter(page_size=self.page_size)

