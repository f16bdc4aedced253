"""A tiny PyTorch DDP training job for NVRx's ft_launcher (CPU, gloo, heartbeats to the launcher).

Started by `ft_launcher` (one per node), which sets RANK/WORLD_SIZE/MASTER_ADDR and restarts the
workers in-job when one fails. Each step all-reduces the gradients of a small linear model,
sends a heartbeat to the launcher's rank monitor (`RankMonitorClient`) and, on rank 0, prints a
Megatron-style iteration line. Every `CKPT_EVERY` steps rank 0 saves the model and writes the
step to `$CKPT_ROOT/latest_checkpointed_iteration.txt`, the file ft_launcher's no-progress tracker
reads (`--ft-checkpoint-iteration-file`); a (re)started worker resumes from it.

Faults come from `$FAULT_DIR/fault-<job id>-<Slurm restart count>` (so a requeued attempt runs
clean), as `<kind>:<rank>`, counted from the step the cycle resumed at:
  crash-once   the rank exits 7 after FAULT_AFTER steps in the launcher's first cycle only
  hang-once    the rank stops (SIGSTOP) after FAULT_AFTER steps in the first cycle only: no more
               heartbeats, its peers block in the all-reduce
  crash-always the rank exits 7 after FAULT_AFTER steps in every cycle (a checkpoint is written
               first, so each cycle makes progress and the launcher runs out of restarts)
  xid-always   like crash-always, but first prints the kernel's Xid 79 line for its node (a GPU
               that fell off the bus, as a node's kernel log relayed into the job output shows it)
  no-progress  like crash-once in the first cycle; every later cycle crashes one step after it
               resumed, before any new checkpoint: the launcher sees no progress and exits 93
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime
from pathlib import Path

import torch
import torch.distributed as dist
from nvidia_resiliency_ext.fault_tolerance import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
    RankMonitorClient,
)

ITERATION_FILE = "latest_checkpointed_iteration.txt"
XID = ("{stamp} {host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, name=python, "
       "GPU has fallen off the bus.")


def resume_step(root: Path) -> int:
    try:
        return int((root / ITERATION_FILE).read_text().strip())
    except (OSError, ValueError):
        return 0


def save(root: Path, model: torch.nn.Module, step: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), root / f"step-{step}.pt")
    tmp = root / f".{ITERATION_FILE}.tmp"
    tmp.write_text(f"{step}\n")
    tmp.replace(root / ITERATION_FILE)  # the launcher never reads half a number


def fault(rank: int, step: int, start: int) -> None:
    attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
    path = Path(os.environ["FAULT_DIR"]) / f"fault-{os.environ['SLURM_JOB_ID']}-{attempt}"
    if not path.exists():
        return
    kind, _, who = path.read_text().strip().partition(":")
    if int(who or "-1") != rank:
        return
    cycle = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    after = int(os.environ.get("FAULT_AFTER", "7"))
    if kind == "no-progress" and cycle > 0:
        after = 1
    elif kind in ("crash-once", "hang-once") and cycle > 0:
        return
    if step - start < after:
        return
    print(f"fault injected: {kind} on rank {rank} at step {step} (cycle {cycle})", flush=True)
    if kind == "hang-once":
        os.kill(os.getpid(), signal.SIGSTOP)
    if kind == "xid-always":
        stamp = datetime.now().strftime("%b %d %H:%M:%S")
        print(XID.format(stamp=stamp, host=os.uname().nodename, pid=os.getpid()), flush=True)
    os._exit(7)


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    monitor = RankMonitorClient()
    monitor.init_workload_monitoring()
    root = Path(os.environ["CKPT_ROOT"])
    steps, every = int(os.environ.get("STEPS", "1000")), int(os.environ.get("CKPT_EVERY", "5"))
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = resume_step(root)
    if start:
        model.load_state_dict(torch.load(root / f"step-{start}.pt"))
        if rank == 0:
            print(f"resumed from step {start}", flush=True)
    for step in range(start + 1, steps + 1):
        began = time.monotonic()
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        for p in model.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
        optimizer.step()
        monitor.send_heartbeat()
        time.sleep(float(os.environ.get("STEP_SLEEP", "0.2")))
        if rank == 0:
            if step % every == 0:
                save(root, model, step)
            print(f"iteration {step}/ {steps} | loss {loss.item():.4f} | elapsed time per iteration (ms): "
                  f"{(time.monotonic() - began) * 1000:.1f}", flush=True)
        fault(rank, step, start)
    monitor.shutdown_workload_monitoring()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
