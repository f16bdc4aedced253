"""Robust outliers: which members of a fleet are far slower than the rest.

The live straggler detector (`goodput.detect.straggler`) and the offline diagnosis of per-rank
step-time tables (`goodput.diagnose.signatures.stalls`) ask the same question of different
inputs, so they share one statistic here (diagnosis must not import the live detectors). Mean and
standard deviation are dragged by the very outlier being looked for, so the centre is the median
and the spread the median absolute deviation (MAD). A member is an outlier when it is many MADs
*and* a meaningful fraction slower than the fleet; the second condition keeps a perfectly uniform
fleet (MAD near zero) from flagging noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

# MAD * 1.4826 estimates the standard deviation of a normal distribution.
MAD_TO_SIGMA = 1.4826
# A floor of 1 % of the median keeps z finite when all but the outlier are identical.
SIGMA_FLOOR = 0.01

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Outlier(Generic[K]):
    key: K
    value: float
    fleet: float       # the fleet's median
    slowdown: float    # 0.25 = 25 % slower than the fleet median
    robust_z: float


def slow_outliers(values: Mapping[K, float], *, z: float, min_slowdown: float, min_count: int
                  ) -> list[Outlier[K]]:
    """Members whose value (a time: larger is slower) stands out, slowest first; [] below
    `min_count` members or for a fleet median that is not positive."""
    if len(values) < min_count:
        return []
    fleet = statistics.median(values.values())
    if fleet <= 0:
        return []
    mad = statistics.median(abs(v - fleet) for v in values.values())
    sigma = max(MAD_TO_SIGMA * mad, SIGMA_FLOOR * fleet)
    found = []
    for key, value in values.items():
        score = (value - fleet) / sigma
        slowdown = value / fleet - 1.0
        if score > z and slowdown > min_slowdown:
            found.append(Outlier(key=key, value=value, fleet=fleet, slowdown=slowdown, robust_z=score))
    return sorted(found, key=lambda o: -o.slowdown)
