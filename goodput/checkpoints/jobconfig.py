"""How a job tells goodput where its checkpoints are: tokens in its Slurm comment.

    sbatch --comment="goodput:opt-in goodput:ckpt=megatron:/lustre/proj/run7/checkpoints"

`goodput:ckpt=<layout>:<root>` names the layout (`auto` to detect) and an absolute root; the
generic layout takes its rule from `goodput:ckpt-pattern=`, `goodput:ckpt-step-regex=` and
`goodput:ckpt-marker=` (empty: no marker), and `goodput:ckpt-settle=<seconds>` overrides the
settle time. Comments are whitespace-separated, so a root cannot contain spaces. The comment
belongs to the job's owner: a malformed token is reported, never guessed at.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from goodput.checkpoints.discover import layout_name
from goodput.checkpoints.model import CheckpointConfig

PREFIX = "goodput:ckpt"
_TOKEN = re.compile(r"(?:^|\s)goodput:ckpt(-[a-z-]+)?=(\S*)")


class CheckpointCommentError(ValueError):
    """The job's comment carries a goodput:ckpt token that cannot be understood."""


def config_from_comment(comment: str) -> CheckpointConfig | None:
    """The checkpoint config a job's comment asks for; None when it has no goodput:ckpt token."""
    fields: dict[str, str] = {}
    for match in _TOKEN.finditer(comment or ""):
        fields[match.group(1) or ""] = match.group(2)
    if "" not in fields:
        if fields:
            raise CheckpointCommentError(f"{PREFIX}-… options without {PREFIX}=<layout>:<root>")
        return None
    layout, sep, root = fields[""].partition(":")
    if not sep or not root.startswith("/"):
        raise CheckpointCommentError(f"{PREFIX}={fields[''][:80]} is not <layout>:<absolute root>")
    try:
        canonical = layout_name(layout)
    except ValueError as error:
        raise CheckpointCommentError(str(error)) from error
    values: dict[str, object] = {"layout": canonical, "root": root.rstrip("/") or "/"}
    options = {"-pattern": "pattern", "-step-regex": "step_regex", "-marker": "marker", "-settle": "settle_s"}
    for key, value in fields.items():
        if not key:
            continue
        if key not in options:
            raise CheckpointCommentError(f"unknown option {PREFIX}{key}; known: {', '.join(sorted(options))}")
        values[options[key]] = value if value or key != "-marker" else None
    if "step_regex" in values:
        try:
            re.compile(str(values["step_regex"]))
        except re.error as error:
            raise CheckpointCommentError(f"{PREFIX}-step-regex does not compile: {error}") from error
    try:
        return CheckpointConfig.model_validate(values)
    except ValidationError as error:
        raise CheckpointCommentError(f"{PREFIX}: {error.errors()[0]['msg']}") from error


def to_comment(config: CheckpointConfig) -> str:
    """The comment tokens that ask for `config` (the inverse of `config_from_comment`)."""
    tokens = [f"{PREFIX}={config.layout or 'auto'}:{config.root}"]
    if config.layout == "generic":
        tokens += [f"{PREFIX}-pattern={config.pattern}", f"{PREFIX}-step-regex={config.step_regex}",
                   f"{PREFIX}-marker={config.marker or ''}"]
    if config.settle_s != CheckpointConfig.model_fields["settle_s"].default:
        tokens.append(f"{PREFIX}-settle={config.settle_s:g}")
    return " ".join(tokens)
