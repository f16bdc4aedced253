"""Failure classes for `benchmarks.goodput_sim`: which class each Llama 3 interruption is, and goodput's
measured latency per class.

It exists apart from `_sim_model.py` (the event loop) and `goodput_sim.py` (command line, report) so
that each stays under ~400 lines, and so that the mapping, the reader of the latency benchmark's file
and their tests sit in one place. It imports nothing from the model at run time (the model imports it).

The latency benchmark (`python -m benchmarks latency --json`) measures goodput per failure class, not
per Llama 3 component: it cannot fail an HBM stack, but it can make a driver log an Xid. The mapping
below says which measured class stands for each component of `_sim_model.LLAMA3_INTERRUPTIONS`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks._sim_model import SimParams

# The one table of goodput's per-class latencies the simulation reads unless told otherwise.
DEFAULT_TABLE = Path(__file__).with_name("goodput_latencies.json")
CLASSES = ("xid-kernel-log", "crash", "hang", "node-failure", "app-error")
# goodput detects these but blames the application and takes no action: a person fixes the code (or
# finds the bad part), so the action takes the manual model's time whatever the latency file says.
MANUAL_ACTION_CLASSES = frozenset({"app-error"})

# Llama 3 component (Table 5) -> the failure class whose measured latency goodput gets for it.
COMPONENT_CLASS: dict[str, str] = {
    # The NVIDIA driver logs an Xid to the kernel log (79 fallen off the bus, 48 double-bit ECC ...).
    "Faulty GPU": "xid-kernel-log",
    # Uncorrectable HBM ECC errors and failed row remaps are logged as Xids (48, 63/64, 94/95).
    "GPU HBM3 Memory": "xid-kernel-log",
    # SRAM ECC errors are logged as Xids too (contained/uncontained, 94/95).
    "GPU SRAM Memory": "xid-kernel-log",
    # GSP firmware errors and timeouts are logged as Xids (119/120).
    "GPU System Processor": "xid-kernel-log",
    # An overheating GPU throttles, then drops off the bus with an Xid (79).
    "GPU Thermal Interface + Sensor": "xid-kernel-log",
    # No log line names the hardware: the job's own NaN/loss-spike check fails the run, which reads as
    # an application error until a person finds the bad GPU (Llama 3 found SDC only by investigation).
    "Silent Data Corruption": "app-error",
    # A lost link stalls the collectives without a node-side error; goodput's hang detector sees the
    # job stop making progress before NCCL's watchdog (10 min by default) would abort it.
    "Network Switch/Cable": "hang",
    # Same as a lost link: the ranks on that node block in collectives, the job stops making progress.
    "NIC": "hang",
    # The watchdog aborts the rank with its timeout message and the job exits: a crash.
    "NCCL Watchdog Timeouts": "crash",
    # The node goes away (reboot, power loss, hardware fault): Slurm marks it DOWN/NOT_RESPONDING.
    "Host Maintenance": "node-failure",
    "SSD": "node-failure",
    "Power Supply": "node-failure",
    "Server Chassis": "node-failure",
    "IO Expansion Board": "node-failure",
    "CPU": "node-failure",
    "System Memory": "node-failure",
    # The code (or a library it depends on) is wrong: goodput blames the application, a person fixes it.
    "Software Bug": "app-error",
    "Dependency": "app-error",
}


class LatencyFileError(ValueError):
    """A latency file that the simulation cannot use; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Variant:
    """Another value for one class's detection, shown beside the measured one (e.g. node loss at
    Slurm's own timeout, as if goodput had no agent heartbeats)."""

    cls: str
    detection_p50_s: float
    source: str


@dataclass(frozen=True)
class LatencyFile:
    path: str
    commit: str | None
    settings: Any
    # (class, detection median s, action median s or None: a person acts), in CLASSES order.
    class_latency: tuple[tuple[str, float, float | None], ...]
    # class -> (where its detection came from, where its action came from); empty for a latency
    # benchmark's output, whose values all come from that one run.
    sources: dict[str, tuple[str, str]] = field(default_factory=dict)
    variants: dict[str, Variant] = field(default_factory=dict)


def _median(path: Path, cls: str, entry: dict[str, Any], key: str, where: str = "classes") -> float:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise LatencyFileError(f"{path}: {where}.{cls}.{key} is {value!r}, not a latency in seconds")
    return float(value)


def read_latency_file(path: Path) -> LatencyFile:
    """Per-class medians from the latency benchmark's JSON (`classes` with all of CLASSES).

    Only the p50s are used: every class keeps the model's lognormal `auto_sigma`. A sigma fitted from
    p50 and p99 would rest on the one or two slowest of a handful of faults per class, i.e. on noise.
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise LatencyFileError(f"{path}: cannot read a latency JSON: {err}") from err
    classes = data.get("classes") if isinstance(data, dict) else None
    if not isinstance(classes, dict):
        raise LatencyFileError(
            f"{path}: no 'classes' key (per-class latencies for {', '.join(CLASSES)}); an old-format file "
            "with one top-level detection_p50_s? Rerun `python -m benchmarks latency --json`, or pass "
            "--detection-s/--action-s instead")
    missing = [c for c in CLASSES if not isinstance(classes.get(c), dict)]
    if missing:
        raise LatencyFileError(f"{path}: 'classes' lacks {', '.join(missing)} (has {', '.join(classes) or 'none'})")
    table = tuple(
        (c, _median(path, c, classes[c], "detection_p50_s"),
         None if c in MANUAL_ACTION_CLASSES else _median(path, c, classes[c], "action_p50_s"))
        for c in CLASSES
    )
    commit = data.get("commit")
    return LatencyFile(str(path), None if commit is None else str(commit), data.get("settings"), table)


def _source(path: Path, where: str, entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise LatencyFileError(f"{path}: {where}.{key} is {value!r}: every value in the table names its source")
    return value


def read_latency_table(path: Path = DEFAULT_TABLE) -> LatencyFile:
    """The simulation's own table (benchmarks/goodput_latencies.json): per class, the medians as in the
    latency benchmark's output and, beside each, where it came from and on how many faults it rests;
    plus named variants of one class's detection. A value without its source is refused."""
    base = read_latency_file(path)
    data = json.loads(path.read_text())
    classes = data["classes"]
    sources = {c: (_source(path, f"classes.{c}", classes[c], "detection_source"),
                   _source(path, f"classes.{c}", classes[c], "action_source")) for c in CLASSES}
    variants: dict[str, Variant] = {}
    raw = data.get("variants", {})
    if not isinstance(raw, dict):
        raise LatencyFileError(f"{path}: variants is {type(raw).__name__}, not an object")
    for name, entry in raw.items():
        where = f"variants.{name}"
        if not isinstance(entry, dict) or entry.get("class") not in CLASSES:
            raise LatencyFileError(f"{path}: {where} needs a class, one of {', '.join(CLASSES)}")
        variants[name] = Variant(entry["class"], _median(path, name, entry, "detection_p50_s", "variants"),
                                 _source(path, where, entry, "detection_source"))
    return dataclasses.replace(base, sources=sources, variants=variants)


def latency_report(params: SimParams, shares: dict[str, float], source: LatencyFile | None) -> dict[str, Any]:
    """What the goodput model used, per class, for the report and the JSON result."""
    given = {c: (d, a) for c, d, a in params.class_latency}
    classes = {}
    for c in CLASSES:
        det, act = given.get(c, (params.detection_s, params.action_s))
        classes[c] = {"share": shares.get(c, 0.0), "detection_p50_s": det, "action_p50_s": act,
                      "action_by": "goodput" if act is not None else "person"}
        if source and c in source.sources:
            classes[c]["detection_source"], classes[c]["action_source"] = source.sources[c]
    return {
        "source": source.path if source else "command line",
        "commit": source.commit if source else None,
        "settings": source.settings if source else None,
        "sigma": params.auto_sigma,
        "manual_action_min": params.manual_action_min,
        "classes": classes,
    }


def render_latencies(lat: dict[str, Any]) -> list[str]:
    about = [f"source {lat['source']}"]
    if lat["commit"] is not None:
        about.append(f"commit {lat['commit']}")
    if lat["settings"] is not None:
        about.append(f"settings {json.dumps(lat['settings'])}")
    lines = ["", f"(c) goodput's latencies by failure class (medians, lognormal sigma {lat['sigma']:g}; "
                 f"{', '.join(about)}):",
             f"{'class':<16}{'share':>8}{'detect s':>10}{'action s':>10}"]
    for c, x in lat["classes"].items():
        act = (f"{x['action_p50_s']:>10.3g}" if x["action_p50_s"] is not None else
               f"{'manual':>10}  (goodput detects, blames the application and takes no action; a person "
               f"acts: the manual model's time, median {lat['manual_action_min']:g} min)")
        lines.append(f"{c:<16}{x['share']:>8.1%}{x['detection_p50_s']:>10.3g}{act}")
    sourced = [(c, x) for c, x in lat["classes"].items() if "detection_source" in x]
    if sourced:
        lines.append("sources:")
        for c, x in sourced:
            lines.append(f"  {c} detection: {x['detection_source']}")
            if x["action_p50_s"] is not None:
                lines.append(f"  {c} action: {x['action_source']}")
    return lines
