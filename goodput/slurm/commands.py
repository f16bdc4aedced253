"""argv lists for the Slurm commands goodput runs; never a shell string.

Each builder validates its identifiers first, so a hostile name (`node1;rm -rf /`, a newline,
10 kB of junk) raises InvalidIdentifierError before anything is executed, and the SSH backend,
which must hand the remote shell one string, quotes these same lists item by item.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from goodput.identifiers import (
    InvalidIdentifierError,
    validate_job_id,
    validate_node_name,
    validate_reason,
    validate_reservation,
)

Argv = list[str]

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_ENV_VALUE = 4096
# goodput.slurm.submit_as's rule for an owner's name, repeated as the builder's last guard.
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.@-]{0,63}$")


def version() -> Argv:
    return ["scontrol", "--version"]


def show_job(job_id: str) -> Argv:
    return ["scontrol", "show", "job", "-o", validate_job_id(job_id)]


def show_node(name: str) -> Argv:
    return ["scontrol", "show", "node", "-o", validate_node_name(name)]


def show_all_nodes() -> Argv:
    return ["scontrol", "show", "node", "-o"]


def show_job_json(job_id: str) -> Argv:
    """23.02+ only (22.05's scontrol has no --json); options first, whatever getopt's mode."""
    return ["scontrol", "--json", "show", "job", validate_job_id(job_id)]


def show_node_json(name: str) -> Argv:
    """23.02+ only."""
    return ["scontrol", "--json", "show", "node", validate_node_name(name)]


def squeue_json() -> Argv:
    """All jobs, ended ones included. 22.05 ignores -j/-t/-u together with --json and lists every
    job; from 23.02 squeue --json keeps its default filter, the jobs not ended (checked on the
    24.11 lab), so every state is asked for."""
    return ["squeue", "--json", "--states=all"]


def squeue_output_patterns(job_id: str) -> Argv:
    """StdOut/StdErr as submitted (`out-%j.log`), not expanded as scontrol prints them."""
    return ["squeue", "--noheader", "--states=all", f"--jobs={validate_job_id(job_id)}",
            "--Format=STDOUT:0|,STDERR:0|"]


def show_topology() -> Argv:
    return ["scontrol", "show", "topology"]


def sinfo_json() -> Argv:
    return ["sinfo", "--json"]


def drain_node(name: str, reason: str) -> Argv:
    return ["scontrol", "update", f"NodeName={validate_node_name(name)}", "State=DRAIN",
            f"Reason={validate_reason(reason)}"]


def resume_node(name: str) -> Argv:
    return ["scontrol", "update", f"NodeName={validate_node_name(name)}", "State=RESUME"]


def requeue(job_id: str, *, hold: bool = False) -> Argv:
    return ["scontrol", "requeuehold" if hold else "requeue", validate_job_id(job_id)]


def hold(job_id: str) -> Argv:
    return ["scontrol", "hold", validate_job_id(job_id)]


def release(job_id: str) -> Argv:
    return ["scontrol", "release", validate_job_id(job_id)]


_DEPENDENCY = re.compile(r"^[a-z0-9_:,?+*]{1,1024}$")


def update_dependency(job_id: str, dependency: str) -> Argv:
    """`dependency` is goodput's rendering of a parsed dependency (goodput.slurm.dependencies);
    the character check is the last guard that it can only ever be one scontrol argument."""
    if not _DEPENDENCY.fullmatch(dependency):
        raise ValueError(f"refusing to write dependency {dependency[:60]!r}")
    return ["scontrol", "update", f"JobId={validate_job_id(job_id)}", f"Dependency={dependency}"]


def exclude_nodes(job_id: str, nodes: Sequence[str]) -> Argv:
    names = ",".join(validate_node_name(n) for n in nodes)
    return ["scontrol", "update", f"JobId={validate_job_id(job_id)}", f"ExcNodeList={names}"]


def show_reservation(name: str) -> Argv:
    return ["scontrol", "show", "reservation", "-o", validate_reservation(name)]


def reservation_add_user(name: str, user: str) -> Argv:
    """`Users+=` adds one user and keeps the others (22.05 supports it; adding twice is a no-op).
    `user` is Slurm's record of a job's owner, checked by `submit_as.validate_user_name`."""
    if not _USER.fullmatch(user):
        raise InvalidIdentifierError(f"invalid user name {user[:60]!r}")
    return ["scontrol", "update", f"ReservationName={validate_reservation(name)}", f"Users+={user}"]


def reservation_remove_user(name: str, user: str) -> Argv:
    """`Users-=` removes one user and keeps the others (the end of a recovery's grant to the pool)."""
    if not _USER.fullmatch(user):
        raise InvalidIdentifierError(f"invalid user name {user[:60]!r}")
    return ["scontrol", "update", f"ReservationName={validate_reservation(name)}", f"Users-={user}"]


def reservation_nodes(name: str, nodes: Sequence[str]) -> Argv:
    """The reservation's whole node list: 22.05 refuses `Nodes+=` ("The +=/-= notation is not
    supported when updating Nodes"), so a refill writes the old list plus the new node."""
    names = ",".join(dict.fromkeys(validate_node_name(n) for n in nodes))
    if not names:
        raise InvalidIdentifierError("a reservation needs at least one node")
    return ["scontrol", "update", f"ReservationName={validate_reservation(name)}", f"Nodes={names}"]


def job_reservation(job_id: str, name: str) -> Argv:
    return ["scontrol", "update", f"JobId={validate_job_id(job_id)}", f"Reservation={validate_reservation(name)}"]


def cancel(job_id: str) -> Argv:
    return ["scancel", validate_job_id(job_id)]


def batch_script(job_id: str) -> Argv:
    """The job's batch script on stdout (`-` as the file name)."""
    return ["scontrol", "write", "batch_script", validate_job_id(job_id), "-"]


def sacct_job(job_id: str) -> Argv:
    """Accounting records of every run of a job (needs slurmdbd; 22.05+ prints --json)."""
    return ["sacct", "--json", f"--jobs={validate_job_id(job_id)}"]


def validate_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """Keys are shell-style names; values one printable line without commas (Slurm's --export
    lists and pyslurm's string form split on commas, so every backend refuses them alike)."""
    checked: dict[str, str] = {}
    for key, value in environment.items():
        if not isinstance(key, str) or not _ENV_KEY.fullmatch(key):
            raise InvalidIdentifierError(f"invalid environment variable name {str(key)[:60]!r}")
        if not isinstance(value, str) or len(value) > MAX_ENV_VALUE:
            raise InvalidIdentifierError(f"environment value of {key} is not a string of at most "
                                         f"{MAX_ENV_VALUE} characters")
        if "," in value or any(not ch.isprintable() for ch in value):
            raise InvalidIdentifierError(f"environment value of {key} must be one printable line "
                                         "without commas")
        checked[key] = value
    return checked


def sbatch(options: Sequence[str], *, exclude: Sequence[str] = (), hold: bool = False) -> Argv:
    """`sbatch --parsable ... --export=ALL` reading the script from stdin.

    `options` come from `resubmit.options_from_record` (already derived from validated scheduler
    output); exclusions are validated here. `--export=ALL` exports sbatch's own environment, which
    `submit_as` has made exactly the copy's (and overrides any `#SBATCH --export` of the script).
    """
    argv = ["sbatch", "--parsable", *options]
    names = [validate_node_name(n) for n in exclude]
    if names:
        argv.append(f"--exclude={','.join(dict.fromkeys(names))}")
    argv.append("--export=ALL")
    if hold:
        argv.append("--hold")
    return argv


def submit_as(become: Sequence[str], environment: Mapping[str, str], sbatch_argv: Sequence[str]) -> Argv:
    """`[runuser -u OWNER --|sudo -n -u OWNER --] env -i K=V... sbatch ...`.

    `env -i` runs after the switch, so nothing of goodput's environment (nor runuser's, sudo's or
    the SSH session's) reaches sbatch, whichever way goodput became the owner. Keys are checked
    here; values come from `submit_as.submission_environment`.
    """
    pairs = []
    for key, value in sorted(environment.items()):
        if not _ENV_KEY.fullmatch(key) or "\0" in value:
            raise InvalidIdentifierError(f"invalid environment entry {key[:60]!r}")
        pairs.append(f"{key}={value}")
    return [*become, "env", "-i", *pairs, *sbatch_argv]


def effective_uid() -> Argv:
    return ["id", "-u"]


def passwd_entry(name: str) -> Argv:
    """The account database entry of `name` (validated by the caller: `submit_as.validate_user_name`)."""
    if not name or name.startswith("-"):
        raise InvalidIdentifierError(f"invalid user name {name[:60]!r}")
    return ["getent", "passwd", name]


def parse_sbatch_parsable(stdout: str) -> str:
    """`1234` or `1234;cluster` -> '1234' (validated)."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    return validate_job_id(first.split(";")[0].strip())


def parse_version(text: str) -> tuple[int, int, int]:
    """`slurm 22.05.8`, `slurm-wlm 24.11.1` -> (22, 5, 8); (0, 0, 0) when unreadable."""
    # bounded digits, and only the head of the text: `scontrol --version` is one short line
    match = re.search(r"(?<![0-9])([0-9]{1,4})\.([0-9]{1,4})(?:\.([0-9]{1,4}))?", (text or "")[:256])
    if not match:
        return (0, 0, 0)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))

