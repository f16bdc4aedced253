"""A submitit job for the coexistence test: a checkpointable trainer that prints a progress line
per step and, in its first attempt, the Xid its node's driver would log. submitit's own signal
handler requeues it when Slurm signals a preemption (SIGUSR2)."""

from __future__ import annotations

import os
import time
from datetime import datetime

import submitit

XID = ("{stamp} {host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, name=python, "
       "GPU has fallen off the bus.")


class Trainer(submitit.helpers.Checkpointable):
    def __call__(self, steps: int, xid_at: int) -> str:
        attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        node = os.environ.get("SLURMD_NODENAME", os.uname().nodename)
        print(f"attempt {attempt} on {node}", flush=True)
        for step in range(1, steps + 1):
            print(f"iteration {step}/ {steps} | loss 1.0000 | elapsed time per iteration (ms): 200.0", flush=True)
            if step == xid_at and attempt == 0:
                print(XID.format(stamp=datetime.now().strftime("%b %d %H:%M:%S"), host=node, pid=os.getpid()),
                      flush=True)
            time.sleep(0.2)
        return "done"
