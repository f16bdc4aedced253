"""`python -m benchmarks <name> [--json] [options]`: one entry point for every benchmark."""

from __future__ import annotations

import importlib
import os
import sys

BENCHMARKS = {
    "latency": "benchmarks.latency",
    "storm": "benchmarks.storm",
    "storm-lab": "benchmarks.storm_lab",
    "classify": "benchmarks.classify_throughput",
    "temporal": "benchmarks.temporal_starts",
    "goodput": "benchmarks.goodput_sim",
    "watch": "benchmarks.watch_capacity",
    "diagnosis": "benchmarks.diagnosis",
    "checkpoints": "benchmarks.checkpoint_cost",
    "console": "benchmarks.console_scale",
    "install-size": "benchmarks.install_size",
    "scan-cost": "benchmarks.scan_cost",
}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in BENCHMARKS:
        print(f"usage: python -m benchmarks {{{','.join(BENCHMARKS)}}} [--json] [options]", file=sys.stderr)
        return 2
    name, argv = sys.argv[1], sys.argv[2:]
    try:
        module = importlib.import_module(BENCHMARKS[name])
    except ModuleNotFoundError as err:
        print(f"benchmark {name} is not available yet: {err}", file=sys.stderr)
        return 2
    # Each module exposes run(argv); classify_throughput predates that and has main(argv).
    entry = getattr(module, "run", None) or module.main
    entry(argv)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # short-lived Temporal clients can abort at interpreter exit (sdk-python#300)
