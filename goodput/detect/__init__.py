"""Stage 1 of the loop, **detect**: everything that notices a job is in trouble and says so as an `Anomaly`.

Inputs come from three places, each a module here: the job's own output (`logtail` tails files,
`push` takes batches from Fluent Bit / Vector, `live` judges lines as they arrive, `progress`,
`hang` and `straggler` read training progress), the GPUs and kernel of a node (`gpu` findings over
NVML samples, `dcgm` exporter text, `kmsg` Xid lines, `agent` the node agent's rules), and Slurm
(`scheduler_watch` diffs jobs and nodes; `watch` holds the watchers' shapes). Detection decides
nothing about culprits or actions: `goodput.diagnose` weighs the anomalies, `goodput.recover` acts.

Nothing here reads a clock or a file by itself where it can be avoided: callers pass the lines they
tailed and the times they observed them, so the same code runs in an activity and in tests.
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
