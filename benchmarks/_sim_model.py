"""The model behind `benchmarks.goodput_sim`: parameters, the failure mix, response models, the event loop.

It exists apart from `goodput_sim.py` (command line, report, JSON) so that each file stays small and so
that tests can drive the model directly, without argparse or printing.

Design in one paragraph: one replication draws a list of failures (time-to-failure measured in the
job's *running* time, component from the Llama 3 table, and the standard-normal draws that set every
latency). The same list is replayed under each response model (common random numbers), so the three
models differ only in their response latencies. Replaying walks the events in time order: run until
the next failure (committing a checkpoint every interval), then detection, action, waiting for a spare
node (a heap of repair-completion events), requeue, restart. The horizon is a fixed wall-clock span.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from benchmarks._sim_classes import CLASSES, COMPONENT_CLASS, MANUAL_ACTION_CLASSES

# "The Llama 3 Herd of Models" (Llama Team, AI @ Meta, 2024), Table 5: root causes of the 419
# unexpected interruptions in a 54-day snapshot of Llama 3 405B pre-training on 16,384 H100 GPUs.
# (component, category in the paper, count, needs a replacement node in this model)
# The counts sum to 419; the paper's percentage column does not match every count (it prints 30.1%
# next to 148 faulty-GPU interruptions, which is 35.3% of 419). The model uses the counts.
# Which failure class (and so which measured goodput latency) each component gets:
# benchmarks._sim_classes.COMPONENT_CLASS.
LLAMA3_INTERRUPTIONS: tuple[tuple[str, str, int, bool], ...] = (
    ("Faulty GPU", "GPU", 148, True),
    ("GPU HBM3 Memory", "GPU", 72, True),
    ("Software Bug", "Dependency", 54, False),
    ("Network Switch/Cable", "Network", 35, True),
    ("Host Maintenance", "Unplanned Maintenance", 32, True),
    ("GPU SRAM Memory", "GPU", 19, True),
    ("GPU System Processor", "GPU", 17, True),
    ("NIC", "Host", 7, True),
    ("NCCL Watchdog Timeouts", "Unknown", 7, False),
    ("Silent Data Corruption", "GPU", 6, True),
    ("GPU Thermal Interface + Sensor", "GPU", 6, True),
    ("SSD", "Host", 3, True),
    ("Power Supply", "Host", 3, True),
    ("Server Chassis", "Host", 2, True),
    ("IO Expansion Board", "Host", 2, True),
    ("Dependency", "Dependency", 2, False),
    ("CPU", "Host", 2, True),
    ("System Memory", "Host", 2, True),
)
LLAMA3_UNEXPECTED = 419
LLAMA3_DAYS = 54
LLAMA3_NODES = 2048  # 16,384 GPUs / 8 per node
# 419 / (54 days * 2048 nodes) = 3.79 interruptions per 1000 node-days.
DEFAULT_RATE_PER_1000_NODE_DAYS = 1000.0 * LLAMA3_UNEXPECTED / (LLAMA3_DAYS * LLAMA3_NODES)

MODELS = ("manual", "seed", "goodput")
# Where every second of the horizon goes. Everything but "productive" is time not spent on training
# that is kept. "tail" is uncommitted work when the horizon cuts a run (at most one interval).
PHASES = (
    "productive",
    "checkpoint_save",
    "lost_progress",
    "detection",
    "action",
    "spare_wait",
    "queue_wait",
    "requeue",
    "restart",
    "tail",
)
LOST_PHASES = PHASES[1:]

_COMPONENTS = [c[0] for c in LLAMA3_INTERRUPTIONS]
_WEIGHTS = [c[2] for c in LLAMA3_INTERRUPTIONS]
_NEEDS_SPARE = {c[0]: c[3] for c in LLAMA3_INTERRUPTIONS}
_WEEK_S = 7 * 86400.0


@dataclass(frozen=True)
class Failure:
    """One job interruption, with every random draw its handling needs (shared by all models)."""

    uptime_s: float  # running time from the previous (re)start to this failure
    component: str
    needs_spare: bool
    z_detect: float  # standard normal: detection latency quantile
    z_action: float  # standard normal: action latency quantile
    z_restart: float  # standard normal: restart/restore cost quantile
    repair_s: float  # how long the drained node is away before it rejoins the spare pool


@dataclass(frozen=True)
class SimParams:
    """Everything that defines one scenario. Times are in the units their names say."""

    days: float = 54.0
    gpus: int = 16384
    gpus_per_node: int = 8
    ckpt_interval_min: float = 30.0
    ckpt_save_s: float = 30.0  # blocking part of a checkpoint save, paid every interval
    restart_min: float = 10.0  # mean restart + restore cost (process start, NCCL init, load checkpoint)
    restart_sigma: float = 0.25
    requeue_min: float = 2.0  # Slurm requeue + scheduling of the whole allocation
    failure_rate: float = DEFAULT_RATE_PER_1000_NODE_DAYS  # interruptions per 1000 node-days
    spares: int | None = None  # healthy spare nodes for drained ones; None: one per 64 job nodes
    repair_days: float = 3.0  # mean time for a drained node to be repaired and rejoin the spares
    repair_sigma: float = 0.8
    # On a busy shared cluster a replacement node comes through the queue: median wait (0: the job
    # owns its spares, as the Llama 3 run did) and its lognormal shape. A hot-spare pool (goodput
    # holding the spares in a reservation) starts the replacement at once instead.
    queue_wait_min: float = 0.0
    queue_sigma: float = 1.0
    hot_spares: bool = False
    # (b) the other automated system ("seed"): its means as given, unpublished, not measured here.
    seed_detection_s: float = 69.0
    seed_action_s: float = 94.0
    # Its action clock ends at "drain" (requeue, restart follow) or "running" (its 94 s holds the requeue).
    seed_clock_ends: str = "drain"
    # App-errors in both automated arms: "person" (manual action time) or "restart" (once, as a crash).
    app_errors: str = "person"
    # (c) goodput: medians (a latency benchmark reports p50), for every failure class not in
    # class_latency: (class, detection median s, action median s or None: a person acts).
    detection_s: float = 1.0
    action_s: float = 2.0
    class_latency: tuple[tuple[str, float, float | None], ...] = ()
    auto_sigma: float = 0.5  # lognormal shape of both automated models' latencies
    # (a) no automation: a person notices and acts.
    manual_on_detect_min: float = 15.0  # median, staffed hours
    manual_off_detect_min: float = 120.0  # median, nights and weekends
    manual_action_min: float = 20.0  # median: find the bad node, drain it, resubmit
    manual_sigma: float = 1.0
    manual_floor_s: float = 60.0  # nobody notices and acts in under a minute
    on_hours: tuple[float, float] = (8.0, 20.0)  # staffed hours, Monday to Friday, local time
    start_hour: float = 9.0  # the run starts on a Monday at this local hour

    @property
    def nodes(self) -> int:
        return max(1, self.gpus // self.gpus_per_node)

    @property
    def spare_nodes(self) -> int:
        return self.spares if self.spares is not None else max(1, round(self.nodes / 64))

    @property
    def horizon_s(self) -> float:
        return self.days * 86400.0

    @property
    def job_rate_per_s(self) -> float:
        """Job interruption rate: MTTF scales as 1 / (nodes x per-node rate) (Kokolis et al.)."""
        return self.failure_rate / 1000.0 * self.nodes / 86400.0

    @property
    def mttf_h(self) -> float:
        return math.inf if self.job_rate_per_s <= 0 else 1.0 / self.job_rate_per_s / 3600.0


def _lognormal(median: float, sigma: float, z: float) -> float:
    return median * math.exp(sigma * z)


def _median_from_mean(mean: float, sigma: float) -> float:
    return mean * math.exp(-0.5 * sigma * sigma)


def _floored_mean(floor: float, median: float, sigma: float) -> float:
    """E[max(floor, X)] for X lognormal with this median and sigma."""
    if sigma <= 0 or floor <= 0:
        return max(floor, median * math.exp(0.5 * sigma * sigma))
    a = (math.log(floor) - math.log(median)) / sigma
    phi = NormalDist().cdf
    return floor * phi(a) + median * math.exp(0.5 * sigma * sigma) * phi(sigma - a)


def class_shares() -> dict[str, float]:
    """Share of the Llama 3 interruptions in each failure class."""
    total = sum(_WEIGHTS)
    return {c: sum(w for comp, w in zip(_COMPONENTS, _WEIGHTS, strict=True) if COMPONENT_CLASS[comp] == c) / total
            for c in CLASSES}


def draw_failures(params: SimParams, rng: random.Random) -> list[Failure]:
    """Failures until their running time alone exceeds the horizon (no model can see more)."""
    rate = params.job_rate_per_s
    out: list[Failure] = []
    if rate <= 0:
        return out
    repair_median = _median_from_mean(params.repair_days * 86400.0, params.repair_sigma)
    total = 0.0
    while total <= params.horizon_s:
        uptime = rng.expovariate(rate)
        component = rng.choices(_COMPONENTS, weights=_WEIGHTS)[0]
        z_d, z_a, z_r, z_rep = (rng.gauss(0.0, 1.0) for _ in range(4))
        out.append(
            Failure(
                uptime_s=uptime,
                component=component,
                needs_spare=_NEEDS_SPARE[component],
                z_detect=z_d,
                z_action=z_a,
                z_restart=z_r,
                repair_s=_lognormal(repair_median, params.repair_sigma, z_rep),
            )
        )
        total += uptime
    return out


class Response:
    """Detection and action latency of one response model, as a function of the failure and wall time."""

    def __init__(self, model: str, params: SimParams) -> None:
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}")
        if params.seed_clock_ends not in ("drain", "running") or params.app_errors not in ("person", "restart"):
            raise ValueError(f"seed_clock_ends {params.seed_clock_ends!r} / app_errors {params.app_errors!r}")
        self.model = model
        self.p = params
        # Medians of (detection, action) per failure class; action None: a person acts.
        self._by_class: dict[str, tuple[float, float | None]] = {}
        if model == "seed":
            seed = (_median_from_mean(params.seed_detection_s, params.auto_sigma),
                    _median_from_mean(params.seed_action_s, params.auto_sigma))
            self._by_class = dict.fromkeys(CLASSES, seed)
        elif model == "goodput":
            given = {c: (d, a) for c, d, a in params.class_latency}
            self._by_class = {c: given.get(c, (params.detection_s, params.action_s)) for c in CLASSES}
        # The app-error policy is the same for both automated arms: a person fixes the application's
        # bug (the default), or each arm restarts it once with its own requeue, as for a crash.
        restart = params.app_errors == "restart"
        for name in MANUAL_ACTION_CLASSES & self._by_class.keys():
            self._by_class[name] = (self._by_class[name][0], self._by_class["crash"][1] if restart else None)
        # Both arms' clocks must end at the same event: when the other system's action ends at the
        # job running again, its requeue is inside it.
        included = model == "seed" and params.seed_clock_ends == "running"
        self.requeue_s = 0.0 if included else params.requeue_min * 60.0

    def _medians(self, f: Failure) -> tuple[float, float | None]:
        return self._by_class[COMPONENT_CLASS[f.component]]

    def detect(self, f: Failure, t: float) -> float:
        if self.model != "manual":
            return _lognormal(self._medians(f)[0], self.p.auto_sigma, f.z_detect)
        p = self.p
        on = max(p.manual_floor_s, _lognormal(p.manual_on_detect_min * 60.0, p.manual_sigma, f.z_detect))
        wait = seconds_to_on_hours(t, p)
        if wait == 0.0:
            return on
        off = max(p.manual_floor_s, _lognormal(p.manual_off_detect_min * 60.0, p.manual_sigma, f.z_detect))
        # Someone may notice off-hours; otherwise the first person in the next morning does.
        return min(off, wait + on)

    def act(self, f: Failure, t: float) -> float:
        if self.model != "manual":
            median = self._medians(f)[1]
            if median is not None:
                return _lognormal(median, self.p.auto_sigma, f.z_action)
        # People act: always in the manual model; in goodput's for a failure it blames on the
        # application (app-error: it detects, takes no action, a person fixes the code). Same draw
        # as the manual model's, so on such a failure both take exactly the same action time.
        p = self.p
        return max(p.manual_floor_s, _lognormal(p.manual_action_min * 60.0, p.manual_sigma, f.z_action))

    def mean_latency_s(self) -> tuple[float, float]:
        """Mean detection and action latency of an automated model over the Llama 3 mix (not defined
        for manual)."""
        if self.model == "manual":
            raise ValueError("manual latencies depend on time of day")
        p, k, total = self.p, math.exp(0.5 * self.p.auto_sigma**2), sum(_WEIGHTS)
        manual_act = _floored_mean(p.manual_floor_s, p.manual_action_min * 60.0, p.manual_sigma)
        det = act = 0.0
        for comp, w in zip(_COMPONENTS, _WEIGHTS, strict=True):
            d, a = self._by_class[COMPONENT_CLASS[comp]]
            det += w * d * k
            act += w * (a * k if a is not None else manual_act)
        return det / total, act / total


def seconds_to_on_hours(t: float, p: SimParams) -> float:
    """0 if wall time t (seconds since the start) is in staffed hours, else seconds until they begin."""
    start, end = p.on_hours
    local = (p.start_hour * 3600.0 + t) % _WEEK_S  # 0 = Monday 00:00
    day, sec = int(local // 86400.0), local % 86400.0
    if day < 5 and start * 3600.0 <= sec < end * 3600.0:
        return 0.0
    # Next weekday whose opening is still ahead.
    for ahead in range(8):
        d = (day + ahead) % 7
        opening = ahead * 86400.0 + start * 3600.0 - sec
        if d < 5 and opening > 0:
            return opening
    raise AssertionError("unreachable: a weekday opening exists within a week")


def queue_draws(seed: int, count: int) -> list[float]:
    """Standard-normal quantiles of the queue waits, from their own stream: adding them leaves every
    other draw of a replication (and so every earlier result) as it was."""
    rng = random.Random(f"queue-wait/{seed}")
    return [rng.gauss(0.0, 1.0) for _ in range(count)]


def simulate(failures: Sequence[Failure], params: SimParams, model: str,
             queue_z: Sequence[float] = ()) -> dict[str, float]:
    """Replay one failure list under one response model; return seconds per phase plus counters.
    `queue_z` holds one standard-normal draw per failure for its queue wait (0 when missing)."""
    resp = Response(model, params)
    horizon = params.horizon_s
    interval = params.ckpt_interval_min * 60.0
    save = params.ckpt_save_s
    segment = interval + save
    requeue = resp.requeue_s
    restart_median = _median_from_mean(params.restart_min * 60.0, params.restart_sigma)
    queue_median = 0.0 if params.hot_spares else params.queue_wait_min * 60.0
    acc = dict.fromkeys(PHASES, 0.0)
    spares = params.spare_nodes
    repairs: list[float] = []  # completion times of drained nodes in repair (events)
    t = 0.0
    interruptions = 0
    spare_waits = 0

    def run(duration: float, cut: bool) -> None:
        n = int(duration // segment)
        acc["productive"] += n * interval
        acc["checkpoint_save"] += n * save
        acc["tail" if cut else "lost_progress"] += duration - n * segment

    def spend(phase: str, duration: float) -> bool:
        """Advance the clock through one down phase; False when the horizon ends inside it."""
        nonlocal t
        if t + duration >= horizon:
            acc[phase] += horizon - t
            t = horizon
            return False
        acc[phase] += duration
        t += duration
        return True

    for i, f in enumerate(failures):
        if t + f.uptime_s >= horizon:
            run(horizon - t, cut=True)
            t = horizon
            break
        run(f.uptime_s, cut=False)
        t += f.uptime_s
        interruptions += 1
        if not spend("detection", resp.detect(f, t)) or not spend("action", resp.act(f, t)):
            break
        if f.needs_spare:
            # The drained node leaves for repair now; a spare replaces it, or the job waits for
            # the earliest repair to finish.
            while repairs and repairs[0] <= t:
                heapq.heappop(repairs)
            heapq.heappush(repairs, t + f.repair_s)
            ready = t
            if len(repairs) > spares:
                ready = max(t, heapq.heappop(repairs))
                spare_waits += ready > t
            if not spend("spare_wait", ready - t):
                break
            z = queue_z[i] if i < len(queue_z) else 0.0
            if queue_median > 0 and not spend("queue_wait", _lognormal(queue_median, params.queue_sigma, z)):
                break
        restart = _lognormal(restart_median, params.restart_sigma, f.z_restart)
        if not spend("requeue", requeue) or not spend("restart", restart):
            break
    if t < horizon:  # the failure list ran out (or was empty): run to the end
        run(horizon - t, cut=True)
    out = dict(acc)
    out["interruptions"] = float(interruptions)
    out["spare_waits"] = float(spare_waits)
    return out


def replication_seed(seed: int, rep: int) -> int:
    return seed * 1_000_003 + rep


def analytic_ettr(params: SimParams, model: str) -> float:
    """Renewal-reward ETTR of an automated model, ignoring spare waits and the horizon cut-off.

    A cycle is one run to failure (mean 1/rate) plus the mean downtime; the kept work in it is the
    number of whole checkpoint segments completed times the interval.
    """
    if model == "manual":
        raise ValueError("manual latencies depend on time of day; no closed form here")
    rate = params.job_rate_per_s
    interval = params.ckpt_interval_min * 60.0
    segment = interval + params.ckpt_save_s
    if rate <= 0:
        return interval / segment
    mean_run = 1.0 / rate
    q = math.exp(-rate * segment)
    mean_lost = mean_run - segment * q / (1.0 - q)  # E[U mod segment], U exponential
    resp = Response(model, params)
    det, act = resp.mean_latency_s()
    down = det + act + resp.requeue_s + params.restart_min * 60.0
    kept = (mean_run - mean_lost) / segment * interval
    return kept / (mean_run + down)
