"""Pure detectors over progress and timing signals: hangs and stragglers.

Nothing here reads a clock or a file: callers pass the lines they tailed, the time they observed
them and the current time, so the same code runs in an activity, in a replayed workflow and in
tests.
"""

from goodput.detect.hang import HangAssessment, HangConfig, Phase, ProgressState, assess_hang, hang_anomaly
from goodput.detect.progress import (
    DEFAULT_PATTERNS,
    ProgressEvent,
    ProgressKind,
    ProgressParser,
    ProgressPatterns,
)
from goodput.detect.straggler import StragglerConfig, StragglerFinding, find_stragglers, straggler_anomaly

__all__ = ["DEFAULT_PATTERNS", "HangAssessment", "HangConfig", "Phase", "ProgressEvent", "ProgressKind",
           "ProgressParser", "ProgressPatterns", "ProgressState", "StragglerConfig", "StragglerFinding",
           "assess_hang", "find_stragglers", "hang_anomaly", "straggler_anomaly"]
