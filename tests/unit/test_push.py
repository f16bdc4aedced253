"""Log push without the network: settings, tokens, parsing hostile bodies, routing to the live detector."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from goodput.detect.push import (
    BodyTooLargeError,
    ParsedBatch,
    PushBodyError,
    PushConfig,
    PushRouter,
    StreamKey,
    authenticate,
    parse_batch,
    token_matches,
)
from goodput.models import AnomalyKind, Category

T0 = datetime(2026, 11, 29, 12, tzinfo=UTC)
TOKEN = "s3cret-token-0123456789"
CONFIG = PushConfig(tokens=(TOKEN,))  # pydantic turns str into SecretStr
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def ndjson(*records: object) -> bytes:
    return "\n".join(json.dumps(r) for r in records).encode()


def parse(body: bytes, config: PushConfig = CONFIG, at: datetime = T0) -> ParsedBatch:
    return parse_batch(body, config, cluster="lab", received_at=at)


def texts(batch: ParsedBatch, key: StreamKey) -> list[str]:
    return [line.text for line in batch.streams[key]]


# -- settings and tokens -----------------------------------------------------------------------


def test_defaults_are_off_and_loopback() -> None:
    config = PushConfig()
    assert (config.enabled, config.host, config.port) == (False, "127.0.0.1", 8787)
    assert config.max_body_bytes == 4 << 20 and config.max_line_chars == 1 << 20
    assert config.fields.message == ("log", "message", "msg")


def test_enabled_needs_a_token_and_tokens_must_be_long() -> None:
    with pytest.raises(ValidationError, match="at least one token"):
        PushConfig(enabled=True)
    with pytest.raises(ValidationError, match="shorter than 16"):
        PushConfig(tokens=("short",))
    with pytest.raises(ValidationError):
        PushConfig.model_validate({"tokns": [TOKEN]})  # a typo in goodput.toml must fail


def test_tokens_never_appear_in_reprs_or_dumps() -> None:
    config = PushConfig(enabled=True, tokens=(TOKEN,))
    assert TOKEN not in repr(config) and TOKEN not in str(config) and TOKEN not in config.model_dump_json()


def test_bearer_authentication() -> None:
    two = PushConfig(tokens=("another-token-abcdefgh", TOKEN))
    assert authenticate(f"Bearer {TOKEN}", CONFIG) and authenticate(f"bearer  {TOKEN} ", two)
    for header in (None, "", "Bearer", "Bearer ", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x",
                   f"Bearer {TOKEN[:-1]}", "Bearer ünïcødé-token-value", "Bearer \x00\xff"):
        assert not authenticate(header, CONFIG), header
    assert token_matches(TOKEN, two) and not token_matches("", two)
    assert not authenticate(f"Bearer {TOKEN}", PushConfig()), "no configured token admits nothing"


# -- parsing: the shapes shippers send ---------------------------------------------------------


def test_fluent_bit_json_lines() -> None:
    body = ndjson({"date": 1764417600.123, "log": "step 1", "job_id": "42", "hostname": "node3"},
                  {"date": 1764417600.124, "log": XID, "job_id": "42", "hostname": "node3"})
    batch = parse(body)
    key = StreamKey(cluster="lab", job_id="42", attempt=0, host="node3")
    assert batch.accepted == 2 and batch.rejected == () and list(batch.streams) == [key]
    assert texts(batch, key) == ["step 1", XID]


def test_vector_newline_delimited_json_with_attempt_and_cluster() -> None:
    body = ndjson({"message": "a", "host": "gpu-01", "file": "/slurm/slurm-7.out", "source_type": "file",
                   "timestamp": "2026-11-29T12:00:00.000000001Z", "slurm_job_id": 7, "restart_count": "2"},
                  {"message": "b", "host": "gpu-02", "slurm_job_id": "7", "cluster": "other"})
    batch = parse(body)
    assert list(batch.streams) == [StreamKey("lab", "7", 2, "gpu-01", "/slurm/slurm-7.out")]
    assert batch.rejected[0].reason == "cluster 'other' is not served here (this is 'lab')"
    batch = parse(body, PushConfig(clusters=("other",)))
    assert list(batch.streams) == [StreamKey("lab", "7", 2, "gpu-01", "/slurm/slurm-7.out"),
                                   StreamKey("other", "7", 0, "gpu-02")]


def test_a_json_array_body_a_pretty_object_and_arrays_on_lines() -> None:
    records = [{"log": f"line {i}", "job_id": "5", "host": "n1"} for i in range(3)]
    assert parse(json.dumps(records, indent=2).encode()).accepted == 3
    assert parse(json.dumps(records[0], indent=2).encode()).accepted == 1
    assert parse(b"\xef\xbb\xbf" + ndjson(records[:2], records[2])).accepted == 3  # BOM, then an array line


def test_multiline_records_srun_labels_and_rank_fields() -> None:
    body = ndjson({"log": "Traceback (most recent call last):\r\n  File \"x.py\"\n\nRuntimeError: boom\n",
                   "job_id": "9", "host": "n1"},
                  {"log": "  3: NCCL WARN timeout", "job_id": "9", "host": "n1"},
                  {"log": "hello", "job_id": "9", "host": "n1", "rank": 5})
    [lines] = parse(body).streams.values()
    assert [(line.text, line.rank) for line in lines] == [
        ("Traceback (most recent call last):", None), ('  File "x.py"', None), ("RuntimeError: boom", None),
        ("NCCL WARN timeout", 3), ("hello", 5)]


def test_dotted_field_names_reach_nested_objects() -> None:
    config = PushConfig(fields={"job_id": ("kubernetes.labels.job",)})
    batch = parse(ndjson({"log": "x", "kubernetes": {"labels": {"job": "11"}}}), config)
    assert [k.job_id for k in batch.streams] == ["11"]


# -- parsing: hostile bodies -------------------------------------------------------------------


def test_binary_garbage_is_one_clear_error() -> None:
    with pytest.raises(PushBodyError, match=r"not JSON.*line 1"):
        parse(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    with pytest.raises(PushBodyError, match="line 2"):
        parse(b"\n" + bytes(range(256)))


def test_an_empty_body_is_an_empty_batch() -> None:
    batch = parse(b"  \n\n")
    assert (batch.accepted, batch.rejected, dict(batch.streams)) == (0, (), {})


def test_bad_records_are_rejected_one_by_one() -> None:
    good = {"log": "fine", "job_id": "42", "host": "node3"}
    body = b"\n".join([
        json.dumps(good).encode(),
        json.dumps({"log": "x", "job_id": "1;rm -rf /", "host": "node3"}).encode(),
        json.dumps({"log": "x", "job_id": "42", "host": "node1;reboot"}).encode(),
        json.dumps({"log": "x", "host": "node3"}).encode(),
        json.dumps({"job_id": "42"}).encode(),
        json.dumps({"log": {"nested": ["garbage", {"a": None}]}, "job_id": "42"}).encode(),
        json.dumps({"log": "x", "job_id": ["42"]}).encode(),
        json.dumps({"log": "x", "job_id": True}).encode(),
        json.dumps({"log": "x", "job_id": "42", "job_attempt": -1}).encode(),
        json.dumps({"log": "x", "job_id": "42", "rank": "0-7"}).encode(),
        json.dumps({"log": "x", "job_id": "42", "cluster": "../etc"}).encode(),
        json.dumps({"log": "x", "job_id": "9" * 5000}).encode(),
        b'"just a string"',
        b"[1, 2]",
        b"{not json",
        b"[" * 100_000,
        b'{"log": "x", "job_id": ' + b"1" * 5000 + b"}",
        json.dumps(good).encode(),
    ])
    batch = parse(body)
    assert batch.accepted == 2 and batch.rejected_total == 17
    assert [r.line for r in batch.rejected] == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 14, 15, 16, 17]
    reasons = {r.line: r.reason for r in batch.rejected}  # line 14 (an array of two numbers) keeps its last
    assert "invalid job id '1;rm -rf /'" in reasons[2] and "node name" in reasons[3]
    assert "no job id field" in reasons[4] and "no message field" in reasons[5]
    assert "must be a string, got an object" in reasons[6] and "got an array" in reasons[7]
    assert "got a boolean" in reasons[8] and "non-negative integer" in reasons[9] and "'0-7'" in reasons[10]
    assert "cluster name" in reasons[11] and "characters long" in reasons[12]
    assert "expected a JSON object, got str" in reasons[13] and "got int" in reasons[14]
    assert "not JSON" in reasons[15] and "nested too deeply" in reasons[16]
    # Valid JSON whose job id is a 5000-digit integer: read with a digit bound, rejected for its field.
    assert "job id field 'job_id' must be a string, got a 5000-character number" in reasons[17]


def test_ten_megabyte_lines() -> None:
    huge = ndjson({"log": "x" * (10 << 20), "job_id": "42", "host": "node3"})
    with pytest.raises(BodyTooLargeError, match="limit 4194304"):
        parse(huge)
    roomy = PushConfig(max_body_bytes=32 << 20)
    [line] = next(iter(parse(huge, roomy).streams.values()))
    assert line.truncated and len(line.text) == (1 << 20) + len("…[truncated]")


def test_huge_arrays_stay_bounded_and_fast() -> None:
    config = PushConfig(max_lines_per_batch=1000, max_rejections=10)
    started = time.perf_counter()
    batch = parse(b"[" + b",".join([b"{}"] * 1_000_000) + b"]", config)
    assert batch.accepted == 0 and batch.rejected_total == 1_000_000 and len(batch.rejected) == 10
    many = ndjson(*({"log": f"step {i}", "job_id": "1", "host": "n"} for i in range(3000)))
    batch = parse(many, config)
    assert batch.accepted == 1000 and batch.rejected_total == 2000
    assert "send smaller batches" in batch.rejected[0].reason
    assert time.perf_counter() - started < 5  # a ceiling against quadratic blow-ups, not a benchmark


def test_lone_surrogates_are_replaced() -> None:
    [lines] = parse(b'{"log": "bad \\ud800 char", "job_id": "1"}').streams.values()
    assert lines[0].text.encode("utf-8") == b"bad ? char"


# -- routing to the live detector --------------------------------------------------------------


def xid_batch(at: datetime = T0, date: float = 1764417600.5) -> ParsedBatch:
    return parse(ndjson({"log": "iteration 10/ 100 | loss 2.3", "job_id": "42", "host": "node3", "date": date},
                        {"log": XID, "job_id": "42", "host": "node3", "date": date}), at=at)


def test_an_xid_line_is_one_anomaly_naming_the_host() -> None:
    [anomaly] = PushRouter(CONFIG).route(xid_batch(), T0 + timedelta(milliseconds=3))
    assert anomaly.job_id == "42" and anomaly.cluster == "lab" and anomaly.nodes == ("node3",)
    assert "xid-79" in anomaly.signature_ids and anomaly.category is Category.GPU_HARDWARE
    assert anomaly.kind is AnomalyKind.GPU_FAULT and XID in anomaly.evidence
    assert anomaly.observed_at == T0 and anomaly.detected_at == T0 + timedelta(milliseconds=3)


def test_the_same_batch_posted_twice_gives_the_same_anomaly_ids() -> None:
    router = PushRouter(CONFIG)
    first = router.route(xid_batch(), T0)
    retried = router.route(xid_batch(at=T0 + timedelta(seconds=5)), T0 + timedelta(seconds=5))
    assert [a.id for a in first] == [a.id for a in retried] and len(first) == 1
    assert [a.id for a in PushRouter(CONFIG).route(xid_batch(), T0)] == [a.id for a in first]


def test_a_new_batch_with_the_same_text_is_a_new_anomaly() -> None:
    router = PushRouter(CONFIG)
    [first] = router.route(xid_batch(), T0)
    [later] = router.route(xid_batch(at=T0 + timedelta(seconds=1), date=1764417601.5), T0 + timedelta(seconds=1))
    assert first.id != later.id


def test_streams_are_separate_per_host_and_attempt() -> None:
    body = ndjson(*({"log": XID, "job_id": "42", "host": h, "job_attempt": a} for h in ("n1", "n2") for a in (0, 1)))
    anomalies = PushRouter(CONFIG).route(parse(body), T0)
    assert sorted((a.nodes, a.job_attempt) for a in anomalies) == [
        (("n1",), 0), (("n1",), 1), (("n2",), 0), (("n2",), 1)]
    assert len({a.id for a in anomalies}) == 4


def test_clean_lines_raise_nothing_and_detectors_are_bounded() -> None:
    router = PushRouter(PushConfig(max_streams=3))
    for job in range(10):
        assert router.route(parse(ndjson({"log": "loading data", "job_id": str(job), "host": "n1"})), T0) == []
    assert len(router) == 3


def test_a_recreated_stream_never_reuses_an_id_for_another_line() -> None:
    """After an eviction or restart the counter starts higher, so a later Xid is a new anomaly."""
    router = PushRouter(PushConfig(max_streams=1))
    [first] = router.route(xid_batch(), T0)
    router.route(parse(ndjson({"log": "x", "job_id": "1", "host": "n9"})), T0)  # evicts job 42's stream
    [again] = router.route(xid_batch(at=T0 + timedelta(seconds=1), date=1.0), T0 + timedelta(seconds=1))
    assert again.id != first.id


# -- numbers no parser should be fed, and isolation between streams -----------------------------

HUGE = "9" * 5000


def test_a_message_with_a_5000_digit_number_is_rejected_alone() -> None:
    body = ndjson({"log": XID, "job_id": "41", "host": "n1"},
                  {"log": f"  rank      : {HUGE} (local_rank: 0)", "job_id": "42", "host": "n2"},
                  {"log": f"[rank{HUGE}]: RuntimeError: boom", "job_id": "42", "host": "n2"},
                  {"log": "9" * 999 + " is long but not absurd", "job_id": "43", "host": "n3"})
    batch = parse(body)
    assert batch.accepted == 2 and [r.line for r in batch.rejected] == [2, 3]
    assert all("more than 999 digits" in r.reason for r in batch.rejected)
    assert {k.job_id for k in batch.streams} == {"41", "43"}


def test_an_array_with_one_5000_digit_integer_keeps_its_other_records() -> None:
    body = ('[{"log": "x", "job_id": "1", "rank": ' + HUGE + '}, {"log": "y", "job_id": "2", "n": -' + HUGE
            + '}, {"log": "z", "job_id": "3"}]').encode()
    batch = parse(body)
    assert batch.accepted == 2 and [r.line for r in batch.rejected] == [1]
    assert "rank field 'rank' must be a non-negative integer, got a 5000-character number" in batch.rejected[0].reason
    assert {k.job_id for k in batch.streams} == {"2", "3"}  # an unused huge field is only carried along


def test_a_stream_whose_lines_cannot_be_judged_is_rejected_and_the_others_are_routed() -> None:
    from goodput.diagnose.signatures import Catalogue, Match, default_catalogue
    from goodput.diagnose.signatures.prefixes import RepeatedPrefix

    class Exploding(Catalogue):
        def match_line(self, line: str, line_no: int = 0, layout: RepeatedPrefix | None = None) -> list[Match]:
            if "explode" in line:
                raise ValueError("a detector bug")
            return super().match_line(line, line_no, layout)

    packaged = default_catalogue()
    router = PushRouter(CONFIG, catalogue=Exploding(packaged.signatures, packaged.version))
    body = ndjson({"log": XID, "job_id": "41", "host": "n1"},
                  {"log": "explode", "job_id": "42", "host": "n2"},
                  {"log": "fine", "job_id": "42", "host": "n2"},
                  {"log": XID, "job_id": "43", "host": "n3"})
    routed = router.route_each(parse(body), T0)
    assert sorted(a.job_id for a in routed.anomalies) == ["41", "43"]
    assert [r.line for r in routed.rejected] == [2, 3]
    assert "job 42 attempt 0: its lines could not be judged (ValueError)" in routed.rejected[0].reason
    assert [(k.job_id, str(e)) for k, e in routed.failures] == [("42", "a detector bug")]
    assert len(router) == 2  # the failed stream's detector is dropped; the next batch starts afresh
    with pytest.raises(ValueError, match="a detector bug"):
        router.route(parse(body), T0)
