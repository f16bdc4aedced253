"""Print one JSON `GpuSample` per GPU from NVML, to check the collector on a real GPU machine.

    .venv/bin/python scripts/nvml_probe.py [--xid-wait-ms 2000] [--pretty]

stdout: one JSON object per GPU (every field; None where the GPU refused the query, with the
reason in "errors"). stderr: one JSON summary (driver, GPU count, Xid registration). Exit status:
0 when NVML answered, 2 when NVML is unavailable (no driver or library), 3 when it sees no GPU.
Only pydantic and nvidia-ml-py are needed, not the rest of goodput's dependencies.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--xid-wait-ms", type=int, default=0,
                        help="wait this long for Xid events before sampling (default: don't wait)")
    parser.add_argument("--no-events", action="store_true", help="do not register for Xid events")
    parser.add_argument("--pretty", action="store_true", help="indent the JSON")
    args = parser.parse_args(argv)

    # Run as a file (`python scripts/nvml_probe.py`), the repository root is not on the path.
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    from activities.adapters.gpu_nvml import NvmlCollector, NvmlUnavailableError

    collector = NvmlCollector(watch_xids=not args.no_events)
    try:
        collector.open()
    except NvmlUnavailableError as err:
        print(json.dumps({"error": str(err)}), file=sys.stderr)
        return 2
    try:
        events = collector.poll_xid_events(args.xid_wait_ms) if args.xid_wait_ms > 0 else []
        samples = collector.sample()
        for sample in samples:
            print(json.dumps(sample.model_dump(mode="json"), indent=2 if args.pretty else None))
        summary = {"driver": collector.driver_version(), "gpus": len(samples),
                   "xid_events_seen": [e.model_dump(mode="json") for e in events],
                   "xid_registration_errors": collector.event_errors}
        print(json.dumps(summary), file=sys.stderr)
    finally:
        collector.close()
    return 0 if samples else 3


if __name__ == "__main__":
    sys.exit(main())
