"""Which goodput.toml goodput reads, and how a bad setting is reported without its value.

The config decides where goodput sends its credentials (the Temporal API key, the Slurm JWT,
the webhook URL), so it is read only from a file its operator controls. The first of these that
exists is the config, and only that one:

1. `--config PATH` or `GOODPUT_CONFIG` (named by the operator; a missing file means defaults);
2. `./goodput.toml`, the embedded demo's habit (`make up` from a checkout), only when the file
   and the directory it is in belong to this user or root and no one else can write them: an
   operator who runs goodput in another user's directory must not read that user's settings;
3. `$XDG_CONFIG_HOME/goodput/goodput.toml` (`~/.config/goodput/goodput.toml`);
4. `/etc/goodput/goodput.toml`.

Each is refused, with a one-line error naming the file and why, when another user owns it or can
write it (goodput.private_files). A refused file is never skipped for the next one: an operator
who meant that file must learn it was not used.

A validation error's text carries the offending value (pydantic's `input_value`), which may be a
token or an OAuth secret: `describe` rewrites it as the key's path, the message, and where the
key came from (the environment variable or the file), never the value.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from pydantic import ValidationError

from goodput.private_files import check_parent, check_trusted

ENV_PREFIX = "GOODPUT_"
LOCAL_CONFIG = Path("goodput.toml")
SYSTEM_CONFIG = Path("/etc/goodput/goodput.toml")
# `goodput --config PATH`, for the Settings built while the command starts (not os.environ: a
# process that builds Settings twice, as the tests do, must not inherit one command's flag).
_FLAG: ContextVar[Path | None] = ContextVar("goodput_config_flag", default=None)


class SettingsError(ValueError):
    """Settings that do not validate, described without their values."""


@contextmanager
def config_flag(path: Path | None) -> Iterator[None]:
    token = _FLAG.set(path)
    try:
        yield
    finally:
        _FLAG.reset(token)


def user_config(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".config")
    return Path(base) / "goodput" / "goodput.toml"


def config_file(environ: Mapping[str, str] | None = None) -> Path | None:
    """The one config file to read, checked; None: defaults and the environment only."""
    env = os.environ if environ is None else environ
    explicit = _FLAG.get() or env.get("GOODPUT_CONFIG")
    if explicit:
        path = Path(explicit)
        if not os.path.exists(path):
            return None
        check_trusted(path, "config file")
        return path
    if os.path.lexists(LOCAL_CONFIG):
        check_parent(LOCAL_CONFIG, "config file")
        check_trusted(LOCAL_CONFIG, "config file")
        return LOCAL_CONFIG
    for path in (user_config(env), SYSTEM_CONFIG):
        if os.path.exists(path):
            check_trusted(path, "config file")
            return path
    return None


def check_data_dir(path: Path) -> None:
    """The data directory holds the keys, the audit log and the fake cluster's state: another
    user who owns it could plant or swap them. A relative one (the demo's `.goodput`, in whatever
    directory the operator stands in) is the ambient case and is held to the config's rule: no one
    else may write it or the directory it is in. One named by an absolute path was the site's
    choice and need only belong to this user or root: a Kubernetes emptyDir is root's, mode 0777,
    and private to the pod. The secrets in it are checked file by file either way."""
    if not path.is_absolute():
        check_parent(path, "data directory")
    if os.path.lexists(path):
        check_trusted(path, "data directory", directory=True, others_may_write=path.is_absolute())


def describe(error: ValidationError, config: Path | None, environ: Mapping[str, str] | None = None) -> str:
    """One line per invalid key: its path, what is wrong, and where it was set; no value."""
    env = os.environ if environ is None else environ
    names = {name.upper(): name for name in env}
    top_level = _top_level_keys(config)
    lines = [f"invalid settings ({error.error_count()}):"]
    for item in error.errors(include_url=False, include_input=False, include_context=False):
        loc = item["loc"]
        key = ".".join(str(part) for part in loc) or "(settings)"
        lines.append(f"  {key}: {item['msg']} ({_source(loc, names, top_level, config)})")
    return "\n".join(lines)


def _source(loc: Sequence[int | str], env_names: Mapping[str, str], top_level: frozenset[str],
            config: Path | None) -> str:
    words = [str(part) for part in loc]
    for depth in range(len(words), 0, -1):  # the longest variable that sets this key or one above it
        if not all(isinstance(part, str) for part in loc[:depth]):
            continue
        name = (ENV_PREFIX + "__".join(words[:depth])).upper()
        if name in env_names:
            return f"environment variable {env_names[name]}"
    if words and words[0] in top_level and config is not None:
        return f"in {config}"
    return "from the command line or a default"


def _top_level_keys(config: Path | None) -> frozenset[str]:
    if config is None:
        return frozenset()
    try:
        with open(config, "rb") as stream:
            return frozenset(tomllib.load(stream))
    except (OSError, tomllib.TOMLDecodeError):
        return frozenset()
