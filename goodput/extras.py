"""Optional parts of the install, and the one error a missing one gives.

Most deployments run the CLI Slurm backend on a head node with no NVSentinel and no embedded
Temporal server, so the packages only other modes need are extras (pyproject.toml): SSH mode's
asyncssh, NVSentinel's gRPC runtime, the OTLP exporters, the embedded dev server's `temporal` binary. A module that
needs one imports it through `require`, at the moment the mode is chosen, so a lean install starts
and a missing extra names itself and the command that installs it instead of a bare ImportError.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import NamedTuple


class Extra(NamedTuple):
    """One optional part: the pip extra that installs it, its import name ("" for a binary) and what needs it."""

    name: str
    module: str
    needed_by: str

    @property
    def provides(self) -> str:
        return f"the optional package {self.module!r}" if self.module else "the `temporal` CLI"


_OTLP = "opentelemetry.exporter.otlp.proto.http"
# Keyed by what a caller asks for; `name` is the pip extra (one extra may serve several keys).
EXTRAS: dict[str, Extra] = {
    "ssh": Extra("ssh", "asyncssh", "scheduler slurm-ssh (slurm.ssh_host)"),
    "nvsentinel": Extra("nvsentinel", "grpc", "NVSentinel's gRPC receiver and push-back"),
    "otlp-metrics": Extra("otlp", f"{_OTLP}.metric_exporter", "metrics to an OTLP collector (telemetry.otlp_endpoint)"),
    "otlp-traces": Extra("otlp", f"{_OTLP}.trace_exporter", "traces to an OTLP collector (telemetry.otlp_endpoint)"),
    "embedded": Extra("embedded", "", "the embedded Temporal dev server (`goodput up`, the tests)"),
}


class MissingExtraError(ImportError):
    """An optional package the chosen mode needs is not installed."""

    def __init__(self, extra: Extra, cause: BaseException | None = None) -> None:
        detail = f" ({cause})" if cause is not None else ""
        super().__init__(f"{extra.needed_by} needs {extra.provides}, which is not installed{detail}: "
                         f"pip install 'goodput[{extra.name}]'")
        self.extra = extra


def require(name: str) -> ModuleType:
    """Import the module behind `EXTRAS[name]`, or raise `MissingExtraError` saying how to install it."""
    extra = EXTRAS[name]
    if not extra.module:
        raise ValueError(f"extra {name!r} installs a program, not a module")
    try:
        return importlib.import_module(extra.module)
    except ImportError as exc:
        raise MissingExtraError(extra, exc) from exc
