"""The lab benchmarks on a newer Slurm (24.11, 26.05) that runs inside a Debian root (scripts/slurm-lab/root.sh).

goodput has no setting for running Slurm commands inside a root, and the benchmarks measure goodput
as shipped, so nothing in goodput changes: a directory of shims goes first on PATH for goodput's
processes and for the harness itself, one per Slurm client command, each `exec`ing the root's
binary through chroot(8). The shim never evaluates its arguments (`"$@"` only), so a job comment or
a node list reaches the root's `scontrol` exactly as goodput built it; a shim whose root has gone
(unmounted, rebuilt) refuses with 127 instead of falling through to the host's 22.05 client.

chroot(8) starts the command in the root's `/`: every path the benchmark hands Slurm must be
absolute and exist on both sides, which is why its work directory lives in the lab's directory
(up.sh bind-mounts that at the same path inside the root).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # _slurm_lab builds its labs with this module
    from benchmarks._slurm_lab import LabSite

SLURM_COMMANDS = ("scontrol", "squeue", "sinfo", "sbatch", "scancel", "sacct")
HOST_VERSION = "22.05"  # Debian 12's Slurm, installed on the host by scripts/slurm-lab/install.sh
ROOT_VERSIONS = ("24.11", "26.05")
# As tests/slurm/conftest.py's versioned labs: ports of the 22.05 lab plus this, directory plus "-V",
# so labs of several versions can stand side by side.
PORT_OFFSET = {"24.11": 1000, "26.05": 2000}
CHROOT = Path("/usr/sbin/chroot")


class RootMissing(RuntimeError):
    """No usable Slurm root: shims that fell through to the host's Slurm would measure the wrong version."""


def lab_site(site: LabSite, version: str) -> LabSite:
    """Where the lab on Slurm `version` lives: the 22.05 site itself, or its own directory and ports."""
    if version == HOST_VERSION:
        return site
    offset = PORT_OFFSET[version]
    return dataclasses.replace(site, dir=site.dir.with_name(f"{site.dir.name}-{version}"),
                               ctl_port=site.ctl_port + offset, slurmd_baseport=site.slurmd_baseport + offset,
                               rest_port=site.rest_port + offset)


def root_dir(version: str, environ: Mapping[str, str]) -> Path:
    """Where up.sh looks for (and root.sh caches) the root of `version`, as scripts/slurm-lab/env.sh says."""
    return Path(environ.get("SLURMLAB_ROOTS", "/var/cache/goodput-slurmlab")) / f"slurm-{version}"


def write_shims(directory: Path, root: Path, chroot: Path = CHROOT) -> Path:
    """`directory`, holding one executable shim per Slurm command that runs that command in `root`.

    Raises RootMissing, writing nothing, unless `root` is an absolute directory with every command
    in its /usr/bin."""
    if not root.is_absolute() or not root.is_dir():
        raise RootMissing(f"no Slurm root at {str(root)!r}")
    missing = [name for name in SLURM_COMMANDS if not os.access(root / "usr" / "bin" / name, os.X_OK)]
    if missing:
        raise RootMissing(f"the root {root} has no {', '.join(missing)}")
    directory.mkdir(parents=True, exist_ok=True)
    for name in SLURM_COMMANDS:
        binary = shlex.quote(str(root / "usr" / "bin" / name))
        shim = directory / name
        # The root is checked on every call: a root unmounted under a running benchmark must not
        # let the command fall through to the host's Slurm.
        shim.write_text(f"#!/bin/sh\n# {name} from the Slurm root {root} (benchmarks/_slurm_root.py)\n"
                        f"[ -x {binary} ] || {{ echo \"{name}: no Slurm root at \"{shlex.quote(str(root))} >&2; "
                        f"exit 127; }}\n"
                        f"exec {shlex.quote(str(chroot))} {shlex.quote(str(root))} /usr/bin/{name} \"$@\"\n")
        shim.chmod(0o755)
    return directory
