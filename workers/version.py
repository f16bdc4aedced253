"""`goodput --version`: what is installed and what it talks to, for a bug report.

The package version always; the git commit when run from a checkout; the Temporal server's and
Slurm's versions when they answer within a short timeout. A piece that cannot be had says why in
a word and never fails the command: --version is what one runs when something is already wrong.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from goodput.config import Settings

TIMEOUT_S = 2.0


def package() -> str:
    try:
        return metadata.version("goodput")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


CHECKOUT = Path(__file__).resolve().parent.parent


def git_commit(here: Path = CHECKOUT) -> str | None:
    if not (here / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty", "--abbrev=12"],
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def slurm() -> str:
    binary = shutil.which("sinfo")
    if binary is None:
        return "not found (no sinfo on PATH)"
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unavailable ({type(err).__name__})"
    return done.stdout.strip()[:80] or f"unavailable (sinfo exited {done.returncode})"


async def _temporal(settings: Settings) -> str:
    from temporalio.api.workflowservice.v1 import GetSystemInfoRequest  # only here: --help stays light

    from workers.client import connect_from

    client = await connect_from(settings)
    info = await client.workflow_service.get_system_info(GetSystemInfoRequest(), timeout=None)
    return info.server_version or "unknown (the server did not say)"


def temporal(settings: Settings) -> str:
    address = settings.temporal_address
    try:
        version = asyncio.run(asyncio.wait_for(_temporal(settings), TIMEOUT_S))
    except Exception as err:
        return f"unreachable at {address} ({type(err).__name__})"
    return f"{version} at {address}"


def report(settings: Settings | None) -> str:
    lines = [f"goodput {package()}"]
    commit = git_commit()
    if commit:
        lines.append(f"git commit: {commit}")
    lines.append(f"temporal server: {temporal(settings)}" if settings is not None
                 else "temporal server: unknown (settings unreadable: see `goodput doctor`)")
    lines.append(f"slurm: {slurm()}")
    return "\n".join(lines) + "\n"
