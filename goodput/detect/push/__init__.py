"""Pushed logs: batches of JSON records from log shippers, turned into anomalies by the live detector.

Some sites cannot give goodput read access to job output files, but already run Fluent Bit or
Vector on every node. Those shippers POST batches of JSON records; this module is everything
about such a batch that needs no network: the settings, the bearer-token check, parsing and
validating a body into per-stream lines, and `PushRouter`, which keeps one `LiveLogDetector` per
(cluster, job, attempt, host, file) so pushed lines are judged exactly like tailed ones. Every
anomaly carries the file its record claimed (`Anomaly.pushed`): whether it is the job's own output
is decided later, against Slurm's record (goodput.diagnose.provenance), before anything acts on it.

Bodies are hostile input. A record that is not an object, lacks a field, or names a job id that
no scheduler call may carry is rejected on its own (line number and reason); only a body in
which nothing is JSON fails as a whole, and a stream whose lines cannot be judged is rejected
without costing the other streams of its batch their anomalies. Sizes are bounded everywhere: the body, each line, the
lines of a batch, the rejections reported and the number of detectors kept.
"""

from goodput.detect.push.batch import (
    BodyTooLargeError,
    OversizedNumber,
    ParsedBatch,
    PushBodyError,
    PushLine,
    Rejection,
    StreamKey,
    parse_batch,
)
from goodput.detect.push.config import MAX_ATTEMPT, MIN_TOKEN_CHARS, PushConfig, PushFields, authenticate, token_matches
from goodput.detect.push.router import PushRouter, Routed

__all__ = [
    "MAX_ATTEMPT", "MIN_TOKEN_CHARS", "BodyTooLargeError", "OversizedNumber", "ParsedBatch", "PushBodyError",
    "PushConfig", "PushFields", "PushLine", "PushRouter", "Rejection", "Routed", "StreamKey", "authenticate",
    "parse_batch", "token_matches",
]
