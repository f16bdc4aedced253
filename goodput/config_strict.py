"""Unknown settings are errors: a mistyped safety limit must stop goodput, not fall back to a default.

The models a setting lands in (the Policy and what it holds, OptInRule, ConsoleUser) ignore
unknown fields on purpose: they travel in workflow inputs, and a history recorded by another
version must still load. So strictness cannot live on those models. It is checked here instead,
on what the operator wrote, before anything is validated: every key of the config file and every
`GOODPUT_*` environment variable (nested `__` names and JSON values included) is walked against
the Settings model's fields. Each unknown one is reported with where it was written (the file or
the variable), its dotted key and the closest valid name (difflib); never its value, which may be
a token.
"""

from __future__ import annotations

import difflib
import json
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from goodput.config_sources import ENV_PREFIX, SettingsError

# GOODPUT_* variables that are not settings: read by goodput itself (GOODPUT_CONFIG, the log
# format), set in a resumed job's environment (GOODPUT_RESUME_*), read by the Slurm prolog
# (deploy/slurm/goodput-prolog.sh) and by the test suite's own switches. A job step, the prolog's
# environment or a CI runner may hand them to goodput: they are not typos.
NOT_SETTINGS = frozenset({
    "CONFIG", "LOG_FORMAT",
    "PUSH_URL", "PUSH_TOKEN", "PROLOG_ENV", "NODE_GPUS", "SMI_TIMEOUT", "CA_FILE",
    "REQUIRE_SLURM", "TEST_WORKERS", "FUZZ_PROFILE", "FUZZ_REPORT", "CONSOLE_SCREENSHOTS", "NVRX_DIR",
})
NOT_SETTINGS_PREFIXES = ("RESUME_",)
# A JSON value is walked only this large (a settings value is a few KiB; pydantic parses it anyway).
MAX_JSON_CHARS = 1 << 20


@dataclass(frozen=True)
class Unknown:
    """One unknown key: where it was written, its dotted path, and the closest valid name."""

    where: str
    key: str
    closest: str | None

    def line(self) -> str:
        hint = f" (did you mean {self.closest}?)" if self.closest else " (see docs/configuration.md)"
        return f"  {self.key}: unknown setting, {self.where}{hint}"


def check_known(model: type[BaseModel], config: Path | None, environ: Mapping[str, str]) -> None:
    """Raises SettingsError listing every unknown key of `config` and of `GOODPUT_*` in `environ`."""
    found = [*_file_unknowns(model, config), *_env_unknowns(model, environ)]
    if found:
        raise SettingsError("\n".join([f"unknown settings ({len(found)}):", *(u.line() for u in found)]))


def _file_unknowns(model: type[BaseModel], config: Path | None) -> Iterator[Unknown]:
    if config is None:
        return
    try:
        with open(config, "rb") as stream:
            data = tomllib.load(stream)
    except (OSError, tomllib.TOMLDecodeError):
        return  # the settings source reports an unreadable file itself
    for path, names in _walk(model, data, ()):
        key = ".".join(path)
        yield Unknown(f"in {config}", key, _closest(path, names, "."))


def _env_unknowns(model: type[BaseModel], environ: Mapping[str, str]) -> Iterator[Unknown]:
    for variable in sorted(environ):
        upper = variable.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        rest = upper[len(ENV_PREFIX):]
        if rest in NOT_SETTINGS or rest.startswith(NOT_SETTINGS_PREFIXES) or not rest:
            continue
        parts = tuple(rest.lower().split("__"))
        current: type[BaseModel] | None = model
        for depth, part in enumerate(parts):
            if current is None:
                break  # below a free-form map (policy.partition_modes): any name is a key
            names = _names(current)
            if names is None:
                break
            if part not in names:
                path = parts[:depth + 1]
                closest = _closest(path, names, "__")
                yield Unknown(f"environment variable {variable}", ".".join(path),
                              (ENV_PREFIX + closest).upper() if closest else None)
                break
            annotation = current.model_fields[names[part]].annotation
            if depth == len(parts) - 1:
                yield from _json_unknowns(variable, environ[variable], annotation, parts)
            current = model_of(annotation)


def _json_unknowns(variable: str, value: str, annotation: object, parts: tuple[str, ...]) -> Iterator[Unknown]:
    """A variable that sets a whole table as JSON (GOODPUT_POLICY='{...}', GOODPUT_CONSOLE__USERS='[...]')."""
    if len(value) > MAX_JSON_CHARS or not value.lstrip().startswith(("{", "[")):
        return
    try:
        data = json.loads(value)
    except ValueError:
        return  # pydantic reports the value as invalid, without printing it
    for path, names in _walk_value(annotation, data, ()):
        yield Unknown(f"environment variable {variable}", ".".join((*parts, *path)), _closest(path, names, "."))


def _walk(model: type[BaseModel], data: Mapping[str, object],
          at: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Mapping[str, str]]]:
    """Every unknown key below `model`, as (its path, the valid names where it was found)."""
    names = _names(model)
    if names is None:
        return
    for key, value in data.items():
        if key not in names:
            yield (*at, key), names
            continue
        yield from _walk_value(model.model_fields[names[key]].annotation, value, (*at, key))


def _walk_value(annotation: object, value: object,
                at: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Mapping[str, str]]]:
    sub = model_of(annotation)
    if sub is not None and isinstance(value, Mapping):
        yield from _walk(sub, value, at)
        return
    element = _element_model(annotation)
    if element is None:
        return
    kind, model = element
    if kind == "seq" and isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, Mapping):
                yield from _walk(model, item, (*at, str(index)))
    elif kind == "map" and isinstance(value, Mapping):
        for name, item in value.items():
            if isinstance(item, Mapping):
                yield from _walk(model, item, (*at, str(name)))


def _names(model: type[BaseModel]) -> dict[str, str] | None:
    """The keys a model accepts (field names and string aliases) → field name; None: any key."""
    if model.model_config.get("extra") == "allow":
        return None
    names: dict[str, str] = {}
    for name, field in model.model_fields.items():
        names[name] = name
        for alias in (field.alias, field.validation_alias):
            if isinstance(alias, str):
                names[alias] = name
    return names


def _options(annotation: object) -> tuple[object, ...]:
    """The members of an optional or union annotation, else the annotation itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def model_of(annotation: object) -> type[BaseModel] | None:
    models = [a for a in _options(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return models[0] if len(models) == 1 else None


def _element_model(annotation: object) -> tuple[str, type[BaseModel]] | None:
    """("seq", M) for tuple[M, ...] / list[M], ("map", M) for dict[str, M]; None otherwise."""
    for option in _options(annotation):
        origin, args = typing.get_origin(option), typing.get_args(option)
        if origin in (tuple, list, frozenset, set) and args:
            model = model_of(args[0])
            if model is not None:
                return "seq", model
        if origin is dict and len(args) == 2:
            model = model_of(args[1])
            if model is not None:
                return "map", model
    return None


def _closest(path: tuple[str, ...], names: Mapping[str, str], joiner: str) -> str | None:
    match = difflib.get_close_matches(path[-1].lower(), list(names), n=1, cutoff=0.6)
    return joiner.join((*path[:-1], match[0])) if match else None
