"""`goodput config show [--origin]`: the settings goodput would run with, and where each came from.

One precedence decides every key: command-line flags, then `GOODPUT_*` environment variables,
then the one config file, then the defaults (pydantic-settings applies it; this module only
explains it). An operator who wonders why the breaker allows 4 drains, or which file was read,
sees each key's effective value and its origin on one line each.

Secrets never appear: typed secrets dump as `**********`, and URLs lose what may carry a
credential (user info, query, and a webhook's path, which is its token).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel

from goodput.config_sources import ENV_PREFIX
from goodput.config_strict import MAX_JSON_CHARS, model_of

REDACTED = "**********"
# Plain-string settings whose URL path is itself the credential (a Slack-style incoming webhook).
SECRET_URL_PATHS = frozenset({"notify_webhook_url"})


def render(settings: BaseModel, *, flags: Mapping[str, str], environ: Mapping[str, str], config: Path | None,
           origin: bool) -> str:
    """One `key = value` line per setting (TOML-style values), `  # origin` appended under `origin`."""
    file_data = _read(config)
    env = {name.upper(): name for name in environ if name.upper().startswith(ENV_PREFIX)}
    head = [f"# config file: {config if config is not None else 'none'}",
            "# precedence: flags > environment (GOODPUT_*) > config file > defaults"]
    lines = []
    for path, value in _leaves(type(settings), settings.model_dump(mode="json"), ()):
        line = f"{'.'.join(path)} = {json.dumps(_redacted(path, value))}"
        if origin:
            line += f"  # {_origin(path, flags, env, environ, file_data, config)}"
        lines.append(line)
    return "\n".join([*head, *lines])


def _leaves(model: type[BaseModel], data: Mapping[str, object],
            at: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], object]]:
    """Every setting as (dotted path, value): nested tables flattened, lists and free maps whole."""
    for name, field in model.model_fields.items():
        value = data.get(name)
        sub = model_of(field.annotation)
        if sub is not None and isinstance(value, Mapping):
            yield from _leaves(sub, value, (*at, name))
        else:
            yield (*at, name), value


def _redacted(path: tuple[str, ...], value: object) -> object:
    if not isinstance(value, str) or "://" not in value:
        return value
    parts = urlsplit(value)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "") if parts.username or parts.password else parts.netloc
    if parts.username or parts.password:
        netloc = f"{REDACTED}@{netloc}"
    path_part = f"/{REDACTED}" if path[-1] in SECRET_URL_PATHS and parts.path not in ("", "/") else parts.path
    return urlunsplit((parts.scheme, netloc, path_part, REDACTED if parts.query else "", ""))


def _origin(path: tuple[str, ...], flags: Mapping[str, str], env: Mapping[str, str], environ: Mapping[str, str],
            file_data: Mapping[str, object], config: Path | None) -> str:
    dotted = ".".join(path)
    if dotted in flags:
        return f"flag {flags[dotted]}"
    for depth in range(len(path), 0, -1):  # the longest variable that sets this key or a table above it
        name = (ENV_PREFIX + "__".join(path[:depth])).upper()
        if name not in env:
            continue
        if depth == len(path) or _contains(_json(environ[env[name]]), path[depth:]):
            return f"env {env[name]}"
    if _contains(file_data, path):
        return f"file {config}"
    return "default"


def _contains(data: object, path: tuple[str, ...]) -> bool:
    for part in path:
        if not isinstance(data, Mapping) or part not in data:
            return False
        data = data[part]
    return True


def _json(value: str) -> object:
    if len(value) > MAX_JSON_CHARS:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def _read(config: Path | None) -> Mapping[str, object]:
    if config is None:
        return {}
    try:
        with open(config, "rb") as stream:
            return tomllib.load(stream)
    except (OSError, tomllib.TOMLDecodeError):
        return {}
