"""Hostile log-push bodies, over the parser and over real HTTP, and hostile `goodput inject` JSON.

A pushed body is an attacker's bytes twice over: the shipper's framing and the job's own output
inside it. `parse_batch` may only reject a body as a whole with `PushBodyError`; the server may
answer 200 (with per-record rejections), 400, 413 or 415, and never a 5xx for a body. Bodies are
built from Fluent Bit and Vector records with their fields swapped for huge integers, deep
nesting, lone surrogates, wrong types and mutated log lines, then framed as JSON lines or arrays.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from goodput.cli.anomaly_input import AnomalyInputError, from_json_bytes
from goodput.detect.push import PushBodyError, PushConfig, PushRouter, parse_batch
from goodput.models import MAX_PUSHED_PATH, Anomaly
from tests.fuzz.harness import rejects_cleanly, served_in_thread
from tests.fuzz.log_strategies import REAL_LINES, mutated_line, numbers
from workers.push import PushServer

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
# Messages: real lines mutated, kept to a few kilobytes (the catalogue's own long-line cases live in
# test_fuzz_logs.py); a body holds a dozen of them.
real_lines = st.sampled_from(REAL_LINES)
log_lines = st.one_of(real_lines, real_lines, mutated_line(max_repeat=4_000), st.text(max_size=40))
TOKEN = "fuzz-token-0123456789abcdef"
CONFIG = PushConfig(enabled=True, port=0, tokens=(TOKEN,), max_body_bytes=256 << 10, max_lines_per_batch=500,
                    max_streams=200)

# Raw JSON fragments json.dumps cannot produce: huge integers, deep nesting, escapes of lone surrogates.
raw_values = st.one_of(
    numbers.filter(lambda n: n.lstrip("-").isdigit() and n.isascii()),
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    st.sampled_from(['"\\ud800"', '"\\udfff x"', "1e999", "-0", "NaN", "Infinity", "true", "null", "{}", "[]",
                     '"' + "9" * 6000 + '"']),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
nested = st.dictionaries(st.sampled_from(["labels", "job", "log"]),
                         st.dictionaries(st.sampled_from(["job", "log"]), scalars, max_size=2), max_size=2)
json_values = st.one_of(scalars, st.lists(scalars, max_size=3),
                        st.dictionaries(st.text(max_size=6), scalars, max_size=3), nested)
BASE_RECORDS: list[dict[str, object]] = [
    {"date": 1764417600.0001, "log": "", "file": "/slurm/slurm-42.out", "job_id": "42", "hostname": "node3"},
    {"file": "/slurm/slurm-77.out", "host": "gpu-07", "message": "", "source_type": "file",
     "timestamp": "2026-11-29T12:00:00.123456789Z", "job_id": "77", "restart_count": 1},
    {"msg": "", "SLURM_JOB_ID": "9", "node": "hx-1", "SLURM_PROCID": 3, "cluster": "lab", "job_attempt": 0},
    {"log": "", "kubernetes": {"labels": {"job": "11"}}, "job_id": "11", "rank": 5},
]
FIELDS = ["log", "message", "msg", "job_id", "SLURM_JOB_ID", "job_attempt", "restart_count", "host", "hostname",
          "node", "cluster", "rank", "SLURM_PROCID", "kubernetes", "file", "path"]


@st.composite
def record_text(draw: st.DrawFn) -> str:
    """A shipper's record with a mutated log line, then a field or two swapped for something hostile
    (a JSON value of the wrong type, or raw text json.dumps cannot produce: huge integers, deep
    nesting, escaped lone surrogates)."""
    record = dict(draw(st.sampled_from(BASE_RECORDS)))
    message = next(k for k in ("log", "message", "msg") if k in record)
    record[message] = draw(log_lines)
    for key in draw(st.lists(st.sampled_from(FIELDS), max_size=2)):
        record[key] = draw(json_values)
    text = json.dumps(record)
    if draw(st.booleans()):
        key = draw(st.sampled_from(sorted(record)))
        text = text.replace(json.dumps(record[key]), draw(raw_values), 1)
    return text


@st.composite
def push_body(draw: st.DrawFn) -> bytes:
    records = draw(st.lists(record_text(), max_size=5))
    framing = draw(st.sampled_from(["lines", "array", "array-per-line", "pretty"]))
    if framing == "array":
        text = "[" + ",".join(records) + "]"
    elif framing == "array-per-line":
        text = "\n".join("[" + r + "]" for r in records)
    elif framing == "pretty":
        text = "[\n" + ",\n".join(records) + "\n]"
    else:
        text = "\n".join(records)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=10)) + text[at:]
    return text.encode("utf-8", "surrogatepass")


bodies = st.one_of(push_body(), st.binary(max_size=500))


@given(bodies)
def test_parse_batch(body: bytes) -> None:
    batch = rejects_cleanly("push-batch", lambda: parse_batch(body, CONFIG, cluster="lab", received_at=NOW),
                            (PushBodyError,))
    if batch is not None:
        assert batch.accepted + batch.rejected_total >= len(batch.streams)
        assert len(batch.rejected) <= CONFIG.max_rejections
        for key, lines in batch.streams.items():
            assert key.attempt >= 0 and len(lines) <= CONFIG.max_lines_per_batch
            key.file.encode("utf-8")  # the claimed file reaches Temporal payloads and the timeline
            assert len(key.file) <= MAX_PUSHED_PATH and key.file.isprintable()
            assert all(line.rank is None or 0 <= line.rank <= 2**31 for line in lines)
            for line in lines:
                line.text.encode("utf-8")  # no lone surrogate survives into a Temporal payload


ROUTER = PushRouter(CONFIG)


@given(bodies)
def test_route_parsed_batches(body: bytes) -> None:
    """Parsing then judging, as the server does, in one process: no stream may fail. A body the
    parser refuses is no example for the router (`assume`), so the router gets its full count."""
    try:
        batch = parse_batch(body, CONFIG, cluster="lab", received_at=NOW)
    except PushBodyError:
        assume(False)
        return
    routed = rejects_cleanly("push-route", lambda: ROUTER.route_each(batch, NOW), ())
    assert routed is not None and routed.failures == []


class _Sink:
    def __init__(self) -> None:
        self.anomalies = 0

    async def submit(self, anomaly: Anomaly) -> None:
        self.anomalies += 1


@pytest.fixture(scope="module")
def push_url() -> Iterator[str]:
    """A real server on 127.0.0.1 in its own thread and loop, shared by every example."""
    with served_in_thread(PushServer(CONFIG, _Sink(), "lab")) as server:
        yield server.url


@pytest.fixture(scope="module")
def client(push_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=push_url, timeout=30) as http:
        yield http


# A round trip through a real server costs milliseconds: in `make test` a tenth of the profile's
# examples (500); `make fuzz` gives it the full 100,000 like every other target.
@settings(max_examples=settings.default.max_examples if os.environ.get("GOODPUT_FUZZ_PROFILE") == "fuzz"
          else max(1, settings.default.max_examples // 10))
@given(bodies, st.sampled_from(["application/x-ndjson", "application/json", "text/plain", "text/html"]))
def test_push_over_http(client: httpx.Client, body: bytes, content_type: str) -> None:
    def post() -> httpx.Response:
        return client.post("/v1/logs", content=body,
                           headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": content_type})

    response = rejects_cleanly("push-http", post, ())
    assert response is not None
    assert response.status_code in (200, 400, 413, 415), response.text
    result = response.json()
    if response.status_code == 200:
        assert set(result) == {"accepted", "rejected", "rejected_total", "anomalies"}
        assert result["rejected_total"] >= len(result["rejected"])
    else:
        assert result["error"]


anomaly_keys = ["id", "source", "kind", "cluster", "job_id", "job_attempt", "nodes", "ranks", "gpus", "evidence",
                "signature_ids", "category", "observed_at", "detected_at", "progress_step", "step_time_s"]
anomaly_plausible = {
    "kind": st.sampled_from(["gpu-fault", "hang", "crash", "bogus"]), "job_id": st.integers(0, 10**7).map(str),
    "nodes": st.lists(st.sampled_from(["node2", "a;b", "x" * 200]), max_size=3),
    "evidence": st.lists(log_lines, max_size=3), "observed_at": st.sampled_from(["2026-11-29T00:00:00Z", "x"]),
}


@st.composite
def anomaly_json(draw: st.DrawFn) -> bytes:
    record: dict[str, object] = {}
    for key in draw(st.lists(st.sampled_from(anomaly_keys), max_size=8, unique=True)):
        record[key] = draw(st.one_of(anomaly_plausible.get(key, json_values), json_values))
    text = json.dumps(record)
    if record and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(record)))
        text = text.replace(json.dumps(record[key]), draw(raw_values), 1)
    return text.encode("utf-8", "surrogatepass")


@given(st.one_of(anomaly_json(), st.binary(max_size=300)))
def test_anomaly_json(raw: bytes) -> None:
    anomaly = rejects_cleanly("anomaly-json", lambda: from_json_bytes(raw, NOW), (AnomalyInputError,))
    if anomaly is not None:
        anomaly.model_dump_json().encode("utf-8")
