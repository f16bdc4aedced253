"""A tiny real PyTorch DDP training job for the end-to-end tests (CPU, gloo, launched by srun).

Each rank trains a small linear model; gradients are all-reduced; every `CKPT_EVERY` steps a
PyTorch Distributed Checkpoint is written to `$CKPT_ROOT/step-N` (`.metadata` + one shard per
rank). On start it resumes from `$GOODPUT_RESUME_FROM` when goodput exported one (resubmission),
else from the newest valid checkpoint it finds itself with goodput's own discovery (requeue).
Rank 0 prints one Megatron-style iteration line per step.

Faults are injected through `$FAULT_DIR/fault-<job id>-<restart count>` (so a resumed attempt does
not fault again): `xid:<rank>`, `exception:<rank>`, `hang:<rank>`, `truncate-then-xid:<rank>`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from goodput.checkpoints import CheckpointConfig, LocalFileSystem, find_resume_point

# As a node's kernel log would show it (relayed into the job's output): the host is in the line.
XID = ("{stamp} {host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, name=python, "
       "GPU has fallen off the bus.")


def resume_point(root: Path) -> tuple[str | None, int]:
    exported = os.environ.get("GOODPUT_RESUME_FROM")
    if exported:
        return exported, int(os.environ.get("GOODPUT_RESUME_STEP", "0"))
    _, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(layout="dcp", root=str(root), settle_s=0),
                                  datetime.now(UTC))
    return (choice.checkpoint.path, choice.checkpoint.step) if choice.checkpoint else (None, 0)


def stamp() -> str:
    """Megatron's own prefix: when a line was printed, for reading a failed test's story."""
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def fault(rank: int, step: int, newest: Path | None) -> None:
    attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
    path = Path(os.environ["FAULT_DIR"]) / f"fault-{os.environ['SLURM_JOB_ID']}-{attempt}"
    if not path.exists():
        return
    kind, _, who = path.read_text().strip().partition(":")
    if int(who or "-1") != rank or step < int(os.environ.get("FAULT_AFTER", "12")):
        return
    if kind == "truncate-then-xid" and newest is not None:
        for shard in newest.glob("__*.distcp"):
            shard.write_bytes(b"")  # the newest checkpoint is now corrupt
        kind = "xid"
    if kind == "xid":
        stamp = datetime.now().strftime("%b %d %H:%M:%S")
        print(XID.format(stamp=stamp, host=os.uname().nodename, pid=os.getpid()), flush=True)
        os._exit(1)
    if kind == "exception":
        batch: dict[str, int] = {}
        print(batch["input_ids"])  # KeyError, the classic data-pipeline bug
    if kind == "hang":
        os.kill(os.getpid(), signal.SIGSTOP)


def main() -> None:
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    port = 20000 + int(os.environ["SLURM_JOB_ID"]) % 10000 + 100 * int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    root = Path(os.environ["CKPT_ROOT"])
    steps, every = int(os.environ.get("STEPS", "1000")), int(os.environ.get("CKPT_EVERY", "5"))
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start_path, start = resume_point(root)
    if start_path:
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        dcp.load(state, checkpoint_id=start_path)
        model.load_state_dict(state["model"])
        if rank == 0:
            print(f"[{stamp()}] resumed from {start_path} at step {start}", flush=True)
    newest: Path | None = None
    for step in range(start + 1, steps + 1):
        began = time.monotonic()
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        for p in model.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
        optimizer.step()
        time.sleep(float(os.environ.get("STEP_SLEEP", "0.2")))
        if step % every == 0:
            newest = root / f"step-{step}"
            dcp.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint_id=str(newest))
        if rank == 0:
            print(f"[{stamp()}] iteration {step}/ {steps} | loss {loss.item():.4f} | elapsed time per iteration (ms): "
                  f"{(time.monotonic() - began) * 1000:.1f}", flush=True)
        fault(rank, step, newest)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
