"""Hostile Slurm JSON: squeue/sinfo `--json` and slurmrestd's objects, OpenAPI document and
answers come over the network or from a login node, so every parser returns or rejects with its
typed error, a job looked up in a list is never another job, and no error repeats the token.

Examples start from recorded 22.05 documents (and 24.11 synthetic ones) and mutate them: values
replaced by any JSON, keys dropped, huge numbers, deep nesting, NaN, cut or noisy text.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from activities.adapters.slurm_rest import SlurmRestBackend
from goodput.scheduler import SchedulerError
from goodput.slurm import restapi
from goodput.slurm.hostlist import MAX_EXPANDED
from goodput.slurm.jsonout import (
    SlurmJsonError,
    find_job,
    job_from_json,
    load,
    node_from_json,
    parse_sinfo_json,
    parse_squeue_json,
)
from tests.fuzz.harness import rejects_cleanly
from tests.fuzz.slurm_strategies import DIGITS, FIXTURES, numbers

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

# -- JSON ---------------------------------------------------------------------------------------



def _trimmed(name: str) -> str:
    """A fixture document with at most four entries per list: mutations reach every field sooner."""
    document = json.loads((FIXTURES / name).read_text())
    for key in ("jobs", "nodes", "sinfo"):
        if isinstance(document.get(key), list):
            document[key] = document[key][:4]
    return json.dumps(document)


JSON_DOCUMENTS = {name: _trimmed(name) for name in (
    "squeue-22.05.json", "squeue-24.11-synthetic.json", "squeue-22.05-shared-sample.json",
    "sinfo-22.05.json", "sinfo-24.11-synthetic.json", "sinfo-22.05-shared-sample.json",
    "scontrol-nodes-24.11-synthetic.json", "squeue-controller-down-22.05.json")}

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                         st.sampled_from([1.5, -0.0, 1e300, 2.0**64]), st.text(max_size=12),
                         st.sampled_from(["node[1-99999]x[1-99999]", "n[1-3]", "RUNNING", "", "(null)"]))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["set", "infinite", "number", "x", "state"]),
                                                 inner, max_size=3)), max_leaves=4)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


JSON_PATHS = {name: _paths(json.loads(raw)) for name, raw in JSON_DOCUMENTS.items()}


@st.composite
def mutated_json(draw: st.DrawFn, names: list[str]) -> str:
    name = draw(st.sampled_from(names))
    document = json.loads(JSON_DOCUMENTS[name])
    for path in draw(st.lists(st.sampled_from(JSON_PATHS[name]), max_size=4)):
        parent = document
        try:
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed or replaced it
        if not isinstance(parent, dict | list):
            continue  # an earlier change put a string here: indexing it works, assigning does not
        if draw(st.booleans()):
            parent[path[-1]] = draw(json_values)
        elif isinstance(parent, dict):
            del parent[path[-1]]
    raw = json.dumps(document)
    trick = draw(st.sampled_from(["none", "huge", "deep", "nan", "cut", "noise"]))
    if trick == "huge":
        raw = DIGITS.sub(lambda m: m.group() + "9" * draw(st.integers(0, 5000)), raw, count=1)
    elif trick == "deep":
        depth = draw(st.integers(1, 5000))
        raw = raw.replace('"jobs": [', '"jobs": [' + "[" * depth, 1).replace("]", "]" + "]" * depth, 1)
    elif trick == "nan":
        raw = raw.replace("0", "NaN", 1)
    elif trick == "cut":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif trick == "noise":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.text(max_size=20)) + raw[at:]
    return raw


SQUEUE_NAMES = ["squeue-22.05.json", "squeue-24.11-synthetic.json", "squeue-22.05-shared-sample.json",
                "squeue-controller-down-22.05.json"]
SINFO_NAMES = ["sinfo-22.05.json", "sinfo-24.11-synthetic.json", "sinfo-22.05-shared-sample.json",
               "scontrol-nodes-24.11-synthetic.json"]


@given(mutated_json(SQUEUE_NAMES), st.sampled_from(["8", "101", "1", "38_2", "41+1"]), st.booleans())
def test_squeue_json(raw: str, job_id: str, expand: bool) -> None:
    rejects_cleanly("squeue-json", lambda: parse_squeue_json(raw), (SchedulerError,))
    job = rejects_cleanly("squeue-json-find-job", lambda: find_job(load(raw), job_id, expand_output=expand),
                          (SchedulerError,))
    assert job is None or not job_id.isdigit() or job.job_id == job_id  # never another job of the list


@given(mutated_json(SINFO_NAMES))
def test_sinfo_json(raw: str) -> None:
    nodes = rejects_cleanly("sinfo-json", lambda: parse_sinfo_json(raw), (SchedulerError,))
    assert nodes is None or len(nodes) <= MAX_EXPANDED


REST_JOB = json.loads(JSON_DOCUMENTS["squeue-24.11-synthetic.json"])["jobs"][0]
REST_NODE = json.loads(JSON_DOCUMENTS["scontrol-nodes-24.11-synthetic.json"])["nodes"][0]


@given(st.sampled_from([REST_JOB, REST_NODE]),
       st.lists(st.tuples(st.sampled_from(sorted({*REST_JOB, *REST_NODE})), json_values), max_size=4))
def test_rest_objects(base: dict[str, Any], changes: list[tuple[str, Any]]) -> None:
    obj = {**base, **dict(changes)}
    rejects_cleanly("rest-job-object", lambda: job_from_json(obj), (SlurmJsonError,))
    rejects_cleanly("rest-node-object", lambda: node_from_json(obj), (SlurmJsonError,))


SPEC = json.loads((FIXTURES / "openapi-paths-22.05.json").read_text())
versions = st.one_of(st.sampled_from(restapi.SUPPORTED_VERSIONS), st.builds(lambda n: f"v0.0.{n}", numbers))
path_keys = st.one_of(st.builds(lambda v, tail: f"/slurm/{v}/{tail}", versions,
                                st.sampled_from(["jobs", "nodes", "job/{job_id}", "node/{node_name}", "job/{" * 50])),
                      st.text(max_size=40))
specs = st.one_of(
    st.just(SPEC),
    st.dictionaries(path_keys, st.one_of(st.lists(st.sampled_from(["get", "post", "delete", "GET"])), json_values),
                    max_size=12).map(lambda paths: {"paths": paths}),
    json_values,
)


@given(specs)
def test_rest_openapi(spec: Any) -> None:
    version = rejects_cleanly("rest-openapi", lambda: restapi.choose_version(spec), (SchedulerError,))
    assert version is None or version in restapi.SUPPORTED_VERSIONS


# The capabilities reader only ever sees a spec whose version was chosen: mostly the real one,
# with paths dropped, added or replaced.
edited_specs = st.builds(
    lambda drop, extra: {"paths": {**{k: v for i, (k, v) in enumerate(SPEC["paths"].items()) if i not in drop},
                                   **extra}},
    st.sets(st.integers(0, len(SPEC["paths"])), max_size=8),
    st.dictionaries(path_keys, st.one_of(st.lists(st.sampled_from(["get", "post", "delete", "GET"])), json_values),
                    max_size=4))


@given(edited_specs)
def test_rest_capabilities(spec: Any) -> None:
    try:
        version = restapi.choose_version(spec)
    except SchedulerError:
        assume(False)
        return
    rejects_cleanly("rest-capabilities", lambda: restapi.capabilities(spec, version), (SchedulerError,))


TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJmdXp6In0.ZnV6ei1zZWNyZXQtc2lnbmF0dXJl"


@given(st.sampled_from([200, 200, 400, 401, 404, 500, 503]), st.one_of(
    mutated_json(SQUEUE_NAMES), st.binary(max_size=200), st.builds(lambda t: f'{{"errors": ["{t}"]}}', st.just(TOKEN))))
def test_rest_client(status: int, body: str | bytes) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json=SPEC)
        return httpx.Response(status, content=body.encode() if isinstance(body, str) else body)

    async def calls() -> None:
        backend = SlurmRestBackend("https://restd.test", user="goodput", token=TOKEN,
                                   transport=httpx.MockTransport(answer))
        try:
            for call in (lambda: backend.get_job("101"), backend.list_jobs, backend.list_nodes):
                try:
                    await call()
                except SchedulerError as error:
                    assert str(error).strip() and TOKEN not in str(error)
        finally:
            await backend.aclose()

    rejects_cleanly("rest-client", lambda: asyncio.run(calls()), ())

