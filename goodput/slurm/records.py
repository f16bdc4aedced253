"""Reading `scontrol show job -o` and `scontrol show node -o` text (one record per line).

The key=value form is the one machine-readable output every Slurm version has (22.05's scontrol
has no --json). It is not a safe format: values are printed raw, and several are chosen by the
job's owner (JobName, Comment, Command, WorkDir, StdOut/StdErr/StdIn, Network, BurstBuffer...)
and may hold spaces, `=`, even newlines. A comment of `goodput:opt-in JobId=999 UserId=root(0)`
prints as what looks like a second JobId and UserId. So this module only splits a line into
(key, value) pairs, and does so without guessing:

* a line is split on single spaces (Slurm separates keys with spaces, nothing else); a token
  starts a key when its first characters are `Key=` (looked at through a bounded prefix, so the
  work is linear in the line, whatever its spaces);
* a key seen twice makes the record ambiguous (AmbiguousRecordError): no "later wins", which is
  exactly what let a comment rewrite the record;
* on a node line `Reason=` is free text up to Slurm's `[user@time]` trailer (the last one on
  the line; 22.05 prints the reason last), so a drain reason cannot forge node keys.

Whether a whole record is the one asked for and cannot have been forged is decided in
`goodput.slurm.unambiguous`; the CLI backend reads nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from goodput.scheduler import JobInfo, JobState, NodeInfo
from goodput.slurm.errors import AmbiguousRecordError, SlurmRecordError
from goodput.slurm.hostlist import HostlistError, expand_hostlist

MAX_KEY = 64  # the longest key-like prefix looked at; Slurm's longest key is under 30
MAX_RECORD = 4 * 1024 * 1024  # one line of scontrol output
MAX_INT_DIGITS = 10  # every counter goodput reads from a record fits uint32

# Only ever applied to at most MAX_KEY characters.
_KEY_NAME = re.compile(r"[A-Z][A-Za-z0-9_]*(?:[/:][A-Za-z0-9_]+)*")
_DIGITS = re.compile(r"[0-9]{1,10}")

NULLS = frozenset({"(null)", "N/A", "None", "n/a", "n/s", "(None)"})

# Job states that are not in goodput's JobState vocabulary map to the closest one.
_JOB_STATE_ALIASES = {
    "REQUEUE_HOLD": JobState.REQUEUED,
    "REQUEUE_FED": JobState.REQUEUED,
    "REQUEUE_CRON": JobState.REQUEUED,
    "STOPPED": JobState.SUSPENDED,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.COMPLETING,
    "CONFIGURING": JobState.RUNNING,
    "POWER_UP_NODE": JobState.RUNNING,
    "UPDATE_DB": JobState.RUNNING,
}

HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"})


def expedite_hold(*, requeue_hold: bool, expedited: bool, held: bool, exit_code: str) -> bool:
    """Whether slurmctld itself holds an expedited requeue (Slurm 25.11+, "holding expedited
    requeue JobId=N as no epilogs failed"): the REQUEUE_HOLD state flag, the job's expedite flag,
    held, and a failed run. An owner's `scontrol requeuehold` leaves the job PENDING with exit
    code 0:0 (recorded on 26.05), so it never counts; nor can a job's own text set these fields."""
    return requeue_hold and expedited and held and exit_code not in ("", "0:0")

# Base node states Slurm prints before any `+FLAG`; `*` after a state means "not responding".
_NODE_FLAG_SUFFIXES = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
                       "%": "POWERING_DOWN", "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT"}


def _key_of(prefix: str) -> str | None:
    """The key a token starts with (`CPUs/Task` for `CPUs/Task=1`), or None.

    Callers pass at most MAX_KEY + 1 characters of the token, which bounds the work per token.
    """
    equals = prefix.find("=")
    if equals <= 0:
        return None
    key = prefix[:equals]
    return key if _KEY_NAME.fullmatch(key) else None


def record_pairs(line: str) -> list[tuple[str, str]]:
    """One record line -> its (key, value) pairs in printed order.

    Raises SlurmRecordError for text that does not start with a key or is over MAX_RECORD,
    and AmbiguousRecordError for a key printed twice.
    """
    line = line.rstrip("\n")
    if "\n" in line:
        raise SlurmRecordError("a record must be one line; this text has several")
    if len(line) > MAX_RECORD:
        raise SlurmRecordError(f"record of {len(line)} characters (limit {MAX_RECORD})")
    tokens = line.split(" ")
    is_node = tokens[0].startswith("NodeName=")
    pairs = _Pairs()
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        found = _key_of(token[:MAX_KEY + 1])
        if found is None:
            pairs.extend_value(token)
            continue
        pairs.start(found, token[len(found) + 1:])
        if is_node and found == "Reason":
            # The reason is free text up to Slurm's `[user@time]` (the last one on the line);
            # without one it runs to the end (22.05 prints it last).
            trailer = _last_trailer(tokens, index)
            for part in tokens[index:trailer if trailer is not None else len(tokens)]:
                pairs.extend_value(part)
            if trailer is None:
                break
            user, _, when = tokens[trailer][1:-1].partition("@")
            pairs.start("ReasonUser", user)
            pairs.start("ReasonTime", when)
            index = trailer + 1
    return pairs.finish()


class _Pairs:
    """(key, value) pairs being collected; a repeated key is refused as it arrives."""

    def __init__(self) -> None:
        self._pairs: list[tuple[str, str]] = []
        self._seen: set[str] = set()
        self._key: str | None = None
        self._value: list[str] = []

    def _close(self) -> None:
        if self._key is not None:
            self._pairs.append((self._key, " ".join(self._value).strip(" ")))

    def start(self, key: str, first: str) -> None:
        if key in self._seen:
            raise AmbiguousRecordError(f"key {key!r} appears twice in one record; a value may be forging it")
        self._close()
        self._seen.add(key)
        self._key, self._value = key, [first]

    def extend_value(self, token: str) -> None:
        if self._key is None:
            if token:
                raise SlurmRecordError(f"record does not start with a key: {token[:40]!r}")
            return
        self._value.append(token)

    def finish(self) -> list[tuple[str, str]]:
        if self._key is None:
            raise SlurmRecordError("no key=value pairs in the record")
        self._close()
        return self._pairs


def _last_trailer(tokens: list[str], start: int) -> int | None:
    """Index of the last `[user@time]` token at or after `start`."""
    for index in range(len(tokens) - 1, start - 1, -1):
        token = tokens[index]
        inner = token[1:-1]
        if (token.startswith("[") and token.endswith("]") and "@" in inner[1:-1]
                and not any(c in inner for c in "[] ")):
            return index
    return None


def split_record(line: str) -> dict[str, str]:
    """One `scontrol show -o` line -> {key: raw value} (AmbiguousRecordError on a repeated key)."""
    return dict(record_pairs(line))


def split_records(text: str) -> list[dict[str, str]]:
    """Several records, one per line (scontrol -o without an id lists all); lines that do not
    start with a key are skipped. Use `unambiguous` for a record someone's job could have shaped."""
    return [split_record(line) for line in text.split("\n")
            if _key_of(line.lstrip(" ")[:MAX_KEY + 1]) is not None]


def clean(value: str | None) -> str:
    """Slurm's spellings of "nothing" as ''."""
    if value is None:
        return ""
    value = value.strip()
    return "" if value in NULLS else value


def to_int(value: str | None, default: int = 0) -> int:
    """A counter of at most MAX_INT_DIGITS digits; anything else (huge, signed, text) -> default."""
    text = clean(value)
    return int(text) if len(text) <= MAX_INT_DIGITS and _DIGITS.fullmatch(text) else default


def job_state(raw: str) -> JobState:
    """`RUNNING`, `PENDING`, `REQUEUE_HOLD`, `CANCELLED by 0` -> JobState (UNKNOWN if new)."""
    token = (raw or "")[:64].strip().split(" ")[0].split("+")[0].upper()
    if token in JobState.__members__:
        return JobState[token]
    return _JOB_STATE_ALIASES.get(token, JobState.UNKNOWN)


def node_state(raw: str) -> tuple[str, tuple[str, ...]]:
    """`IDLE+DRAIN`, `DOWN*+DRAIN`, `MIXED` -> ('IDLE', ('DRAIN',)), ('DOWN', ('NOT_RESPONDING', 'DRAIN'))."""
    parts = [p for p in (raw or "")[:256].strip().upper().split("+") if p]
    if not parts:
        return "UNKNOWN", ()
    flags: list[str] = []
    base = parts[0]
    while base and base[-1] in _NODE_FLAG_SUFFIXES:
        flags.append(_NODE_FLAG_SUFFIXES[base[-1]])
        base = base[:-1]
    if base in {"DRAINED", "DRAINING"}:  # sinfo's long names for IDLE+DRAIN / ALLOC+DRAIN
        base, flags = ("IDLE" if base == "DRAINED" else "ALLOCATED"), [*flags, "DRAIN"]
    flags.extend(parts[1:])
    return base or "UNKNOWN", tuple(dict.fromkeys(flags))


_OWNER = re.compile(r"([^()\s]{0,64})\(([0-9]{1,10})\)")


def owner(value: str | None) -> tuple[str, int | None]:
    """`alice(1001)` -> ('alice', 1001); ('', None) when Slurm printed something else."""
    text = clean(value)
    match = _OWNER.fullmatch(text) if len(text) <= 80 else None
    if match is None or int(match.group(2)) > 2**32 - 1:
        return "", None
    return match.group(1), int(match.group(2))


def hostnames(record: Mapping[str, str], key: str) -> tuple[str, ...]:
    """The names of a hostlist key; a hostlist goodput will not expand is a SlurmRecordError."""
    try:
        return expand_hostlist(clean(record.get(key)))
    except HostlistError as err:
        raise SlurmRecordError(f"{key}: {err}") from None


def job_from_record(record: Mapping[str, str]) -> JobInfo:
    """A JobInfo from `scontrol show job -o` key=values (see `unambiguous.job_record`)."""
    reason = clean(record.get("Reason"))
    priority = clean(record.get("Priority"))
    state = job_state(record.get("JobState", ""))
    if state is JobState.COMPLETING and clean(record.get("EndTime")) in ("", "Unknown"):
        # a requeued job completes its old run with EndTime reset; a finishing one has an end
        state = JobState.REQUEUED
    held = reason in HELD_REASONS or (priority == "0" and state is JobState.PENDING)
    exit_code = clean(record.get("ExitCode"))
    expedite_held = expedite_hold(requeue_hold=clean(record.get("JobState")) == "REQUEUE_HOLD",
                                  expedited=clean(record.get("ExpeditedRequeue")) == "Yes",
                                  held=reason == "job_requeued_in_held_state", exit_code=exit_code)
    user, user_id = owner(record.get("UserId"))
    _, group_id = owner(record.get("GroupId"))
    return JobInfo(
        job_id=clean(record.get("JobId")),
        name=clean(record.get("JobName")),
        state=state,
        state_reason=reason,
        partition=clean(record.get("Partition")),
        nodes=hostnames(record, "NodeList"),
        comment=clean(record.get("Comment")),
        requeue=clean(record.get("Requeue")) == "1",
        restart_count=to_int(record.get("Restarts")),
        exit_code=exit_code,
        stdout_path=clean(record.get("StdOut")),
        stderr_path=clean(record.get("StdErr")),
        command=clean(record.get("Command")),
        work_dir=clean(record.get("WorkDir")),
        excluded_nodes=hostnames(record, "ExcNodeList"),
        held=held,
        expedite_held=expedite_held,
        reservation=clean(record.get("Reservation"))[:1024],
        dependency=clean(record.get("Dependency"))[:4096],
        user=user,
        user_id=user_id,
        group_id=group_id,
    )


def node_from_record(record: Mapping[str, str]) -> NodeInfo:
    """A NodeInfo from `scontrol show node -o` key=values (see `unambiguous.node_record`)."""
    state, flags = node_state(record.get("State", ""))
    return NodeInfo(
        name=clean(record.get("NodeName")),
        state=state,
        flags=flags,
        reason=clean(record.get("Reason")),
        reason_user=clean(record.get("ReasonUser")),
        gres=clean(record.get("Gres")),
    )
