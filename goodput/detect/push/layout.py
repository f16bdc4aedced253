"""The body goodput's Slurm prolog and epilog POST to `/v1/layout`: one node of one job attempt.

The scripts (deploy/slurm/) run as root on compute nodes and hold the push token, but what they
send is still checked like any other body: strict types (a number is a JSON number, a name a
string), no unknown keys, every name in the charset Slurm allows, sizes bounded, and the node
must be in the node list the record itself gives. None of it is trusted for action: attribution
believes a node only once Slurm lists it in the job's allocation (goodput.diagnose.layout).
The node's index is computed here, from Slurm's node list, with the same bounded hostlist
expansion goodput uses everywhere, so the scripts need no `scontrol`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from goodput.detect.push.config import MAX_ATTEMPT, PushConfig
from goodput.diagnose.layout import MAX_GPUS_PER_NODE, MAX_NODELIST_CHARS, GpuSlot, NodeCheck, NodeLayout, node_place
from goodput.models import Cluster, NodeName

MAX_LAYOUT_BODY = 64 << 10
_JOB_ID = r"^[0-9]{1,10}$"  # what SLURM_JOB_ID is on a node: the job's own number, arrays included
_NODELIST = r"^[A-Za-z0-9_.,\[\]\-]+$"


class LayoutBodyError(ValueError):
    """A body that is not a layout record; the message says what is wrong (a 400)."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class WireGpu(GpuSlot, _Strict):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class WireCheck(NodeCheck, _Strict):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class LayoutRecord(_Strict):

    version: Literal[1]
    event: Literal["prolog", "epilog"]
    cluster: Cluster | None = None
    job_id: str = Field(pattern=_JOB_ID)
    restart_count: int = Field(default=0, ge=0, le=MAX_ATTEMPT)
    node: NodeName
    nodelist: str = Field(min_length=1, max_length=MAX_NODELIST_CHARS, pattern=_NODELIST)
    gpus: tuple[WireGpu, ...] = Field(default=(), max_length=MAX_GPUS_PER_NODE)
    check: WireCheck

    @field_validator("gpus")
    @classmethod
    def _distinct(cls, gpus: tuple[WireGpu, ...]) -> tuple[WireGpu, ...]:
        if len({g.index for g in gpus}) != len(gpus):
            raise ValueError("a GPU index appears twice")
        return gpus


def _where(error: ValidationError) -> str:
    first = error.errors(include_input=False, include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return f"{where}: {first['msg'][:200]}"


def parse_layout(body: bytes, config: PushConfig, *, cluster: str) -> tuple[str, LayoutRecord]:
    """(cluster, record) of a body; LayoutBodyError says why one is refused."""
    if len(body) > MAX_LAYOUT_BODY:
        raise LayoutBodyError(f"body is {len(body)} bytes (limit {MAX_LAYOUT_BODY})")
    try:
        record = LayoutRecord.model_validate_json(body, strict=True)
    except ValidationError as err:
        raise LayoutBodyError(_where(err)) from err
    served = (cluster, *config.clusters)
    target = record.cluster or cluster
    if target not in served:
        raise LayoutBodyError(f"cluster {target!r} is not served here (served: {', '.join(served)})")
    return target, record


def node_layout(record: LayoutRecord, recorded_at: datetime) -> NodeLayout:
    """The stored form of a record; LayoutBodyError when its node is not in its node list."""
    try:
        index, count = node_place(record.nodelist, record.node)
    except ValueError as err:
        raise LayoutBodyError(str(err)) from err
    return NodeLayout(job_id=record.job_id, attempt=record.restart_count, node=record.node, node_index=index,
                      node_count=count, nodelist=record.nodelist,
                      gpus=tuple(GpuSlot.model_validate(g.model_dump()) for g in record.gpus),
                      check=NodeCheck.model_validate(record.check.model_dump()), recorded_at=recorded_at)
