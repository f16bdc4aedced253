"""slurmrestd: which OpenAPI version to speak, its paths, and what each version can do.

slurmrestd serves several versions side by side and which ones depends on the Slurm release
(22.05: v0.0.36-v0.0.38 through openapi/v0.0.3x plugins; 23.02: v0.0.39; 24.11: v0.0.40-v0.0.42
through data_parser plugins; 26.05: v0.0.42-v0.0.45). goodput reads the advertised paths from
`/openapi/v3` and picks the newest version it understands rather than hard-coding one, then what
that version can do from the methods listed for its paths: v0.0.38 cannot update nodes (POST /node
is 405); only v0.0.45 (26.05) has `job/{id}/requeue`; excluded nodes are a job update from v0.0.40
(its `job_desc_msg`). What the version lacks needs a CLI or SSH fallback.

The spec comes from the server, so it is read defensively: an object with a `paths` object, at
most MAX_PATHS paths of at most MAX_PATH characters, versions of bounded digits, and anything
else a SlurmJsonError rather than a TypeError or a slow regular expression.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from goodput.identifiers import validate_job_id, validate_node_name
from goodput.scheduler import PermanentSchedulerError
from goodput.slurm.jsonout import SlurmJsonError

# newest first; goodput parses the objects of all of these (see jsonout)
# v0.0.43-45 checked against Slurm 26.05's slurmrestd (tests/fixtures/slurm/26.05/rest-*.json)
SUPPORTED_VERSIONS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38")
# the first version whose job update takes `excluded_nodes` (data_parser's job_desc_msg)
EXCLUDE_SINCE = "v0.0.40"
MAX_PATHS = 10_000
MAX_PATH = 1024
# applied only to paths of at most MAX_PATH characters
_SLURM_PATH = re.compile(r"/slurm/(v[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4})/")


class Capability(StrEnum):
    READ = "read"
    JOB_UPDATE = "job_update"  # hold / release
    JOB_CANCEL = "job_cancel"
    NODE_UPDATE = "node_update"  # drain / resume
    JOB_EXCLUDE = "job_exclude"  # excluded nodes of a pending job
    JOB_REQUEUE = "job_requeue"  # requeue (and requeue held)


def _number(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))


def capabilities(spec: Mapping[str, Any], version: str) -> frozenset[Capability]:
    """What `version` can do, read from the methods the spec lists for its paths.

    Resubmission is always left to the fallback: a copy is submitted as the job's owner, and
    slurmrestd submits as the token's user.
    """
    methods: dict[str, set[str]] = {}
    for path, operations in _paths(spec):
        if path.startswith(f"/slurm/{version}/"):
            methods.setdefault(_template(path[len(f"/slurm/{version}/"):]), set()).update(operations)
    found: set[Capability] = set()
    job, node = methods.get("job/{}", set()), methods.get("node/{}", set())
    if "get" in job and "get" in node and "get" in methods.get("jobs", set()) and "get" in methods.get("nodes", set()):
        found.add(Capability.READ)
    if "post" in job:
        found.add(Capability.JOB_UPDATE)
        if _number(version) >= _number(EXCLUDE_SINCE):
            found.add(Capability.JOB_EXCLUDE)
    if "get" in methods.get("job/{}/requeue", set()):
        found.add(Capability.JOB_REQUEUE)
    if "delete" in job:
        found.add(Capability.JOB_CANCEL)
    if "post" in node:
        found.add(Capability.NODE_UPDATE)
    return frozenset(found)


def advertised_versions(spec: Mapping[str, Any]) -> list[str]:
    """`v0.0.38`-style versions that have `/slurm/...` paths in an OpenAPI document."""
    found = {m.group(1) for path, _ in _paths(spec) if (m := _SLURM_PATH.match(path))}
    return sorted(found, key=_number)


def _paths(spec: Mapping[str, Any]) -> list[tuple[str, set[str]]]:
    """(path, lower-case methods) of an OpenAPI document; SlurmJsonError when it is not one."""
    if not isinstance(spec, Mapping):
        raise SlurmJsonError("the OpenAPI document is not an object")
    paths = spec.get("paths")
    if paths is None:
        return []
    if not isinstance(paths, Mapping):
        raise SlurmJsonError("the OpenAPI document's 'paths' is not an object")
    if len(paths) > MAX_PATHS:
        raise SlurmJsonError(f"the OpenAPI document lists {len(paths)} paths (limit {MAX_PATHS})")
    found: list[tuple[str, set[str]]] = []
    for path, operations in paths.items():
        if not isinstance(path, str) or len(path) > MAX_PATH:
            raise SlurmJsonError("the OpenAPI document has a path that is not a short string")
        if not isinstance(operations, Mapping | list):
            raise SlurmJsonError(f"the operations of {path[:80]!r} are neither an object nor a list")
        methods = {m.lower() for m in operations if isinstance(m, str) and len(m) <= 16}
        found.append((path.replace("\\/", "/"), methods))
    return found


def _template(path: str) -> str:
    """`job/{job_id}` -> `job/{}`: every `{...}` parameter the same, in one pass; 23.02+ lists
    collections with a trailing slash (`jobs/`), the same path as 22.05's `jobs`."""
    out: list[str] = []
    inside = False
    for char in path:
        if inside:
            inside = char != "}"
            if not inside:
                out.append("{}")
        elif char == "{":
            inside = True
        else:
            out.append(char)
    return "".join(out).rstrip("/") + ("{" if inside else "")


def choose_version(spec: Mapping[str, Any], supported: Iterable[str] = SUPPORTED_VERSIONS) -> str:
    """The newest version both sides speak; PermanentSchedulerError when there is none."""
    offered = set(advertised_versions(spec))
    for version in sorted(supported, key=_number, reverse=True):
        if version in offered:
            return version
    raise PermanentSchedulerError(f"slurmrestd offers {sorted(offered, key=_number) or 'no Slurm API'}; "
                                  f"goodput speaks {', '.join(SUPPORTED_VERSIONS)}")


def job_path(version: str, job_id: str) -> str:
    return f"/slurm/{version}/job/{validate_job_id(job_id)}"


def requeue_target(version: str, job_id: str, *, hold: bool) -> str:
    """v0.0.45's `GET job/{id}/requeue`, with the `Hold` flag: a query key without a value
    (`?Hold=` is no hold to 26.05: it requeues the job and runs it again)."""
    return f"{job_path(version, job_id)}/requeue{'?Hold' if hold else ''}"


def jobs_path(version: str) -> str:
    return f"/slurm/{version}/jobs"


def node_path(version: str, name: str) -> str:
    return f"/slurm/{version}/node/{validate_node_name(name)}"


def nodes_path(version: str) -> str:
    return f"/slurm/{version}/nodes"


def hold_body(hold: bool) -> dict[str, Any]:
    return {"hold": hold}


def exclude_body(nodes: Iterable[str]) -> dict[str, Any]:
    """v0.0.40+ `job_desc_msg` with the whole list (Slurm replaces it, as ExcNodeList= does)."""
    return {"excluded_nodes": [validate_node_name(n) for n in nodes]}


def node_update_body(*, drain_reason: str | None) -> dict[str, Any]:
    """v0.0.39+ `update_node_msg`: drain with a reason, or resume."""
    if drain_reason is not None:
        return {"state": ["DRAIN"], "reason": drain_reason}
    return {"state": ["RESUME"]}
