"""`goodput checkpoints ROOT`: what goodput would resume from under a root, and why.

For operators (why did the incident resume from step 500, not 1000?) and for a job's own start-up
script (which checkpoint is whole, and how do I load it?), with the same discovery, validation
and choice the service runs, read with the caller's own permissions. The text form lists every
candidate newest first with its problems and what checking it cost; `--json` is a stable object
for scripts. Exit status: 0 when there is a checkpoint to resume from, 1 when there is none,
2 when the arguments are unusable.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TextIO

from goodput.checkpoints.discover import layout_name
from goodput.checkpoints.fs import FileSystem
from goodput.checkpoints.localfs import LocalFileSystem
from goodput.checkpoints.model import DEFAULT_SETTLE_S, Checkpoint, CheckpointConfig, Discovery, ResumeChoice
from goodput.checkpoints.resume import find_resume_point

# How a job loads one particular checkpoint, per layout ({path}, {step}, {tag}, {root} filled in).
RESUME_HINTS: dict[str, str] = {
    "megatron": "Megatron-LM: --load {root} --ckpt-step {step}",
    "deepspeed": 'DeepSpeed: engine.load_checkpoint("{root}", tag="{tag}")',
    "hf": 'transformers: trainer.train(resume_from_checkpoint="{path}")',
    "lightning": 'Lightning: trainer.fit(model, ckpt_path="{path}")',
    "torchtitan": "torchtitan: --checkpoint.load_step {step}",
    "dcp": 'torch.distributed.checkpoint: dcp.load(state_dict, checkpoint_id="{path}")',
    "nemo": 'NeMo 2: AutoResume(resume_from_path="{path}")',
    "generic": "the job's own loader, at {path}",
}


def resume_hint(checkpoint: Checkpoint, root: str) -> str:
    template = RESUME_HINTS.get(checkpoint.layout, "{path}")
    return template.format(path=checkpoint.path, step=checkpoint.step, tag=checkpoint.tag, root=root)


def report_json(found: Discovery, choice: ResumeChoice) -> dict[str, object]:
    """The `--json` object; its keys are a public contract (add, never rename)."""
    chosen = choice.checkpoint
    return {
        "root": found.root,
        "layout": found.layout,
        "resume_from": None if chosen is None else {**chosen.model_dump(mode="json"),
                                                    "how": resume_hint(chosen, found.root)},
        "explanation": choice.explanation,
        "recheck_after_s": choice.recheck_after_s,
        "skipped": [{"step": s.checkpoint.step, "path": s.checkpoint.path, "reason": s.reason}
                    for s in choice.skipped],
        "checkpoints": [c.model_dump(mode="json") for c in found.checkpoints],
        "problems": list(found.problems),
    }


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def render_text(found: Discovery, choice: ResumeChoice) -> str:
    lines = [f"root:   {found.root}", f"layout: {found.layout or 'none recognised'}"]
    chosen = choice.checkpoint
    if chosen is None:
        lines.append("resume: nothing valid to resume from")
    else:
        lines.append(f"resume: step {chosen.step}  {chosen.path}")
        lines.append(f"        {resume_hint(chosen, found.root)}")
    if choice.recheck_after_s is not None:
        lines.append(f"        a newer checkpoint may settle: look again in {choice.recheck_after_s:.0f} s")
    if found.checkpoints:
        lines.append("")
        lines.append("checkpoints, newest first:")
    for checkpoint in found.checkpoints:
        mark = "ok " if checkpoint.complete else "BAD"
        pointer = "  (the framework's pointer)" if checkpoint.pointer else ""
        lines.append(f"  {mark} step {checkpoint.step:<10} {checkpoint.tag or checkpoint.path}{pointer}")
        lines.append(f"        {checkpoint.files_checked} files, {_size(checkpoint.total_bytes)}; checked by reading "
                     f"{checkpoint.files_read} files, {_size(checkpoint.bytes_read)}")
        lines.extend(f"        problem: {p}" for p in checkpoint.problems)
        lines.extend(f"        unverified: {u}" for u in checkpoint.unverified)
    for problem in found.problems:
        lines.append(f"note: {problem}")
    lines.append("")
    lines.append(f"why: {choice.explanation}")
    return "\n".join(lines) + "\n"


def run_checkpoints(root: str, layout: str | None, as_json: bool, out: TextIO, err: TextIO, now: datetime,
                    settle_s: float = DEFAULT_SETTLE_S, fs: FileSystem | None = None) -> int:
    """`fs` is the local filesystem unless given (the CLI wraps it to show progress)."""
    try:
        layout_name(layout)
        config = CheckpointConfig(root=root, layout=layout, settle_s=settle_s)
    except ValueError as error:
        err.write(f"goodput checkpoints: {error}\n")
        return 2
    if not root.startswith("/"):
        err.write(f"goodput checkpoints: {root} is not an absolute path\n")
        return 2
    found, choice = find_resume_point(fs or LocalFileSystem(), config, now)
    if as_json:
        out.write(json.dumps(report_json(found, choice), ensure_ascii=False) + "\n")
    else:
        out.write(render_text(found, choice))
    return 0 if choice.checkpoint is not None else 1
