"""The stand-in's `pyslurm.JobSubmitDescription` (see `tests.fakes.pyslurm_standin`).

Apart from the rest because submission is where pyslurm's defaults are dangerous for a worker
that resubmits other users' jobs, so this mirrors pyslurm 25.11's `core/job/submission.pyx` in
the details that matter there: `_validate_batch_script` reads `script` from a file when the text
names one; `_set_defaults` makes `environment` "ALL" (the caller's whole environment) and the
working directory the caller's; `_set_environment` sends a dict as itself plus the caller's
SLURM_* variables; `user_id`/`group_id` submit for another user (slurmctld allows only root).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from tests.fakes.pyslurm_standin import Slurmctld

_SUBMIT_ATTRS = frozenset({
    "name", "account", "priority", "comment", "working_directory", "nodes", "excluded_nodes", "required_nodes",
    "constraints", "memory_per_cpu", "memory_per_node", "partitions", "qos", "is_requeueable", "reservations",
    "script", "environment", "time_limit", "cpus_per_task", "gres_per_node", "ntasks", "ntasks_per_node",
    "standard_output", "standard_error", "user_id", "group_id", "array", "dependencies", "gpus", "licenses"})


class JobSubmitDescription:
    """pyslurm.JobSubmitDescription: attributes as keyword arguments, `submit() -> int`."""

    _ctl: ClassVar[Slurmctld]

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            if key not in _SUBMIT_ATTRS:  # pyslurm's cdef class has no other attributes
                raise AttributeError(f"'pyslurm.JobSubmitDescription' object has no attribute '{key}'")
            setattr(self, key, value)

    def __getattr__(self, key: str) -> Any:
        if key in _SUBMIT_ATTRS:
            return None
        raise AttributeError(key)

    def submit(self) -> int:
        script: Any = vars(self).get("script")
        if isinstance(script, str) and Path(script).is_file():  # pyslurm: "a path to a script"
            script = Path(script).read_text()
            vars(self)["script"] = script
        if not isinstance(script, str) or not script.strip():
            raise ValueError("Batch script is empty or none was provided.")
        if not script.startswith("#!"):
            raise ValueError("Not a valid Batch script. First line must start with '#!',followed by the "
                             "path to an interpreter")
        environment = self.job_environment()
        return self._ctl.rpc("submit_batch_job", lambda: self._ctl.submit(self, environment))

    def job_environment(self) -> dict[str, str]:
        """What `_set_environment` sends: "ALL" (the default, also when unset) is the caller's
        whole environment; a dict is itself plus the caller's SLURM_* variables."""
        wanted = self.environment
        if wanted is None or (isinstance(wanted, str) and wanted.casefold() == "all"):
            return dict(os.environ)
        slurm = {k: v for k, v in os.environ.items() if k.startswith("SLURM_")}
        if isinstance(wanted, dict):
            return {**slurm, **{k: str(v) for k, v in wanted.items()}}
        items = str(wanted).split(",")
        base = dict(os.environ) if items[0].casefold() == "all" else {**slurm, "SLURM_GET_USER_ENV": "1"}
        return {**base, **dict(item.split("=", 1) for item in items if "=" in item)}
