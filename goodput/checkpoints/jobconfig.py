"""How a job tells goodput where its checkpoints are: tokens in its Slurm comment.

    sbatch --comment="goodput:opt-in goodput:ckpt=megatron:/lustre/proj/run7/checkpoints"

`goodput:ckpt=<layout>:<root>` names the layout (`auto` to detect) and an absolute root; the
generic layout takes its rule from `goodput:ckpt-pattern=`, `goodput:ckpt-step-regex=` and
`goodput:ckpt-marker=` (empty: no marker), and `goodput:ckpt-settle=<seconds>` overrides the
settle time. Comments are whitespace-separated, so a root cannot contain spaces. The comment
belongs to the job's owner: a malformed token is reported, never guessed at. Tokens are found
with literal string operations (no regex over the comment), every value is bounded in length and
refused when it holds control characters, a root must be absolute without `..` or commas (it is
exported to a resubmitted job), a marker must be a plain name, and the step regex and glob must
compile with RE2, the linear-time engine discovery runs them on.
"""

from __future__ import annotations

from pydantic import ValidationError

from goodput.checkpoints.discover import layout_name
from goodput.checkpoints.fs import RefusedError
from goodput.checkpoints.generic import compile_glob, compile_step_regex
from goodput.checkpoints.metadata import excerpt
from goodput.checkpoints.model import PATH_MAX, CheckpointConfig

PREFIX = "goodput:ckpt"
_OPTIONS = {"-pattern": "pattern", "-step-regex": "step_regex", "-marker": "marker", "-settle": "settle_s"}
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz-")
MAX_OPTION_CHARS = 256
MAX_LAYOUT_CHARS = 32


class CheckpointCommentError(ValueError):
    """The job's comment carries a goodput:ckpt token that cannot be understood."""


def _tokens(comment: str) -> dict[str, str]:
    """`goodput:ckpt[-option]=value` words of the comment, by option ("" for the root token)."""
    fields: dict[str, str] = {}
    for word in comment.split():
        if not word.startswith(PREFIX):
            continue
        key, sep, value = word[len(PREFIX):].partition("=")
        if not sep or (key and not (key.startswith("-") and len(key) > 1 and set(key) <= _KEY_CHARS)):
            continue  # not a goodput:ckpt token (e.g. goodput:ckptx=), as before
        fields[key] = value
    return fields


def _root(value: str) -> str:
    _, sep, root = value.partition(":")
    if not sep or not root.startswith("/"):
        raise CheckpointCommentError(f"{PREFIX}={excerpt(value, 80)} is not <layout>:<absolute root>")
    if len(root.encode("utf-8", "surrogatepass")) > PATH_MAX:
        raise CheckpointCommentError(f"{PREFIX}: the root is longer than {PATH_MAX} bytes")
    if not root.isprintable() or "," in root:
        raise CheckpointCommentError(f"{PREFIX}: the root {excerpt(root, 80)} holds a control character or "
                                     "a comma")
    parts = [p for p in root.split("/") if p and p != "."]
    if ".." in parts:
        raise CheckpointCommentError(f"{PREFIX}: the root {excerpt(root, 80)} climbs with '..'")
    return "/" + "/".join(parts)


def _option(key: str, value: str) -> str | None:
    if len(value) > MAX_OPTION_CHARS or not value.isprintable():
        raise CheckpointCommentError(f"{PREFIX}{key} is longer than {MAX_OPTION_CHARS} characters or holds "
                                     "a control character")
    if key == "-marker":
        if value in {".", ".."} or "/" in value:
            raise CheckpointCommentError(f"{PREFIX}-marker={excerpt(value, 80)} is not a file name")
        return value or None
    try:
        if key == "-step-regex":
            compile_step_regex(value)
        elif key == "-pattern":
            compile_glob(value)
    except RefusedError as error:
        raise CheckpointCommentError(f"{PREFIX}{key}: {error}") from None
    return value


def config_from_comment(comment: str) -> CheckpointConfig | None:
    """The checkpoint config a job's comment asks for; None when it has no goodput:ckpt token."""
    fields = _tokens(comment or "")
    if "" not in fields:
        if fields:
            raise CheckpointCommentError(f"{PREFIX}-… options without {PREFIX}=<layout>:<root>")
        return None
    root = _root(fields[""])
    layout = fields[""].partition(":")[0]
    if len(layout) > MAX_LAYOUT_CHARS:
        raise CheckpointCommentError(f"{PREFIX}: layout {excerpt(layout)} is no known layout")
    try:
        canonical = layout_name(layout)
    except ValueError as error:
        raise CheckpointCommentError("".join(ch if ch.isprintable() else "?" for ch in str(error))) from None
    values: dict[str, object] = {"layout": canonical, "root": root}
    for key, value in fields.items():
        if not key:
            continue
        if key not in _OPTIONS:
            raise CheckpointCommentError(f"unknown option {PREFIX}{excerpt(key, 40)}; known: "
                                         f"{', '.join(sorted(_OPTIONS))}")
        values[_OPTIONS[key]] = _option(key, value)
    try:
        return CheckpointConfig.model_validate(values)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise CheckpointCommentError(f"{PREFIX}: {where}: {first['msg']}") from None


def to_comment(config: CheckpointConfig) -> str:
    """The comment tokens that ask for `config` (the inverse of `config_from_comment`)."""
    tokens = [f"{PREFIX}={config.layout or 'auto'}:{config.root}"]
    if config.layout == "generic":
        tokens += [f"{PREFIX}-pattern={config.pattern}", f"{PREFIX}-step-regex={config.step_regex}",
                   f"{PREFIX}-marker={config.marker or ''}"]
    if config.settle_s != CheckpointConfig.model_fields["settle_s"].default:
        short = f"{config.settle_s:g}"
        tokens.append(f"{PREFIX}-settle={short if float(short) == config.settle_s else repr(config.settle_s)}")
    return " ".join(tokens)
