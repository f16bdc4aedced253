"""PyslurmBackend's resubmission against the pyslurm stand-in: the copy reproduces the job, runs as
its owner with nothing of goodput's environment, and is recognised only by owner and token.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from activities.adapters.slurm_pyslurm import PyslurmBackend, submit_attributes
from goodput.scheduler import PermanentSchedulerError, ResubmitRequest
from goodput.slurm.resubmit import resubmit_tag
from goodput.slurm.submit_as import Account, OwnerError
from tests.fakes.pyslurm_standin import NodeRecord, Slurmctld
from tests.unit.pyslurm_helpers import ALICE, KEY, SCRIPT, USERS, Accounts, new_backend, new_slurmctld, running

ctl = pytest.fixture(name="ctl")(new_slurmctld)
backend = pytest.fixture(name="backend")(new_backend)


async def test_resubmit_reproduces_the_job_and_excludes_nodes(ctl: Slurmctld, backend: PyslurmBackend,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    running(ctl, excluded_nodes=("node9",), required_nodes=("node1", "node2"), account="proj", qos="high",
            constraints=["a100"], reservation="maint", time_limit=90, memory_per_node=64000, ntasks_per_node=4,
            cpus_per_task=8, gres_per_node={"gpu": 8}, standard_error="/scratch/err-7.log",
            working_directory="/scratch/run")
    ctl.nodes["node9"] = NodeRecord("node9")
    request = ResubmitRequest(exclude=("node1",), environment={"GOODPUT_RESUMED": "1"}, hold=True,
                              incident_id="inc-1")
    result = await backend.resubmit_job("7", request)
    assert result.changed and result.new_job_id and result.new_job_id != "7"
    copy = ctl.jobs[int(result.new_job_id)]
    assert copy.excluded_nodes == ("node9", "node1") and copy.required_nodes == ()
    assert copy.comment == f"{resubmit_tag('7', KEY.token('7', 'inc-1'))} goodput:opt-in" and copy.is_requeueable
    assert (copy.account, copy.qos, copy.constraints, copy.reservation) == ("proj", "high", ["a100"], "maint")
    assert (copy.time_limit, copy.memory_per_node, copy.ntasks_per_node, copy.cpus_per_task) == (90, 64000, 4, 8)
    assert copy.gres_per_node == {"gpu": 8} and copy.working_directory == "/scratch/run"
    assert copy.standard_output == f"/scratch/out-{copy.id}.log"  # the %j pattern, not job 7's file
    assert copy.standard_error == f"/scratch/err-{copy.id}.log"
    assert copy.script == SCRIPT and (copy.user_id, copy.group_id) == (0, 0)
    assert copy.environment["GOODPUT_RESUMED"] == "1" and copy.environment["USER"] == "root"
    assert copy.environment["SLURM_CONF"] == "/etc/slurm/slurm.conf"  # pyslurm adds SLURM_* itself
    assert copy.priority == 0 and copy.state == "PENDING" and (await backend.get_job(str(copy.id))).held


def test_submit_attributes_keep_a_pinned_node_list_without_excluded_nodes() -> None:
    job = SimpleNamespace(id=7, comment=None, is_requeueable=False, partition="gpu,debug", num_nodes=2,
                          required_nodes="node[3-4]", excluded_nodes=None, standard_output=None,
                          standard_error=None, ntasks=2)
    owner = Account(name="unit-alice", uid=1001, gid=1001)
    attrs = submit_attributes(job, "7", SCRIPT, owner=owner, token="tk", exclude=("node1",))
    assert attrs["required_nodes"] == ["node3", "node4"] and attrs["excluded_nodes"] == ["node1"]
    assert attrs["partitions"] == "gpu" and attrs["nodes"] == 2 and attrs["ntasks"] == 2
    assert attrs["comment"] == "goodput:resubmit-of=7:tk" and attrs["is_requeueable"] is False
    assert "priority" not in attrs and attrs["environment"] == {}  # never "ALL" (goodput's environment)
    assert (attrs["user_id"], attrs["group_id"], attrs["working_directory"]) == (1001, 1001, "/")


async def test_a_retried_resubmit_finds_its_first_copy(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl)
    first = await backend.resubmit_job("7", ResubmitRequest(exclude=("node1",)))
    again = await backend.resubmit_job("7", ResubmitRequest(exclude=("node1",)))
    assert first.changed and not again.changed and again.new_job_id == first.new_job_id
    assert len(ctl.jobs) == 2
    ctl.jobs[int(first.new_job_id or 0)].state = "FAILED"  # a finished copy: a new recovery may resubmit
    assert (await backend.resubmit_job("7", ResubmitRequest())).changed


async def test_the_copy_runs_as_its_owner_with_nothing_of_goodputs_environment(
        ctl: Slurmctld, backend: PyslurmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOODPUT_PUSH_TOKEN", "s3cret")
    running(ctl, **ALICE)
    result = await backend.resubmit_job("7", ResubmitRequest(environment={"GOODPUT_RESUME_FROM": "/ck/9"}))
    copy = ctl.jobs[int(result.new_job_id or 0)]
    assert (copy.user_id, copy.user_name, copy.group_id) == (1001, "unit-alice", 1001)
    assert "GOODPUT_PUSH_TOKEN" not in copy.environment and "s3cret" not in copy.environment.values()
    assert {k: v for k, v in copy.environment.items() if not k.startswith("SLURM_")} == {
        "HOME": "/home/unit-alice", "USER": "unit-alice", "LOGNAME": "unit-alice", "SHELL": "/bin/bash",
        "PATH": "/usr/local/bin:/usr/bin:/bin", "GOODPUT_RESUME_FROM": "/ck/9"}


async def test_an_unprivileged_worker_cannot_submit_for_the_owner() -> None:
    ctl = Slurmctld(user="goodput", uid=500, users=USERS)
    running(ctl, **ALICE)
    with pytest.raises(PermanentSchedulerError, match="permission denied"):
        await PyslurmBackend(ctl.module, accounts=Accounts()).resubmit_job("7", ResubmitRequest())
    assert list(ctl.jobs) == [7]  # and never as goodput itself


@pytest.mark.parametrize(("owner", "accounts", "match"), [
    ({"user_id": 1001, "user_name": None}, Accounts(), "unknown"),
    (ALICE, Accounts({}), "no account"),
    (ALICE, Accounts({"unit-alice": Account(name="unit-alice", uid=1005, gid=1005)}), "uid 1005"),
])
async def test_resubmit_refuses_an_owner_it_cannot_be(ctl: Slurmctld, owner: dict[str, Any], accounts: Accounts,
                                                     match: str) -> None:
    running(ctl, **owner)
    with pytest.raises(OwnerError, match=match):
        await PyslurmBackend(ctl.module, accounts=accounts).resubmit_job("7", ResubmitRequest())
    assert list(ctl.jobs) == [7]


async def test_another_users_job_claiming_to_be_the_copy_is_ignored(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl, **ALICE)
    tag = resubmit_tag("7", KEY.token("7", "inc-1"))
    running(ctl, 8, comment=f"goodput:opt-in {tag}", user_id=1002, user_name="unit-mallory", group_id=1002)
    running(ctl, 9, comment=f"goodput:opt-in {resubmit_tag('7', '0' * 32)}", **ALICE)
    result = await backend.resubmit_job("7", ResubmitRequest(incident_id="inc-1"))
    assert result.changed and result.new_job_id not in ("8", "9")
    assert ctl.jobs[int(result.new_job_id or 0)].user_name == "unit-alice"


async def test_a_script_shaped_like_a_planted_path_is_not_read(ctl: Slurmctld, backend: PyslurmBackend,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pyslurm reads `script` from a file when it names one; a job whose script is `#!/x` would make
    # the worker submit the contents of ./#!/x (a link to any file the worker can read)
    (tmp_path / "#!").mkdir()
    (tmp_path / "#!" / "x").write_text("#!/bin/sh\necho worker-only secret\n")
    monkeypatch.chdir(tmp_path)
    running(ctl)
    ctl.jobs[7].script = "#!/x"
    with pytest.raises(PermanentSchedulerError, match="path"):
        await backend.resubmit_job("7", ResubmitRequest())
    assert list(ctl.jobs) == [7]


def test_stand_in_submission_environment_is_pyslurms(ctl: Slurmctld, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOODPUT_PUSH_TOKEN", "s3cret")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    submit = ctl.module.JobSubmitDescription
    everything = ctl.jobs[submit(script=SCRIPT).submit()].environment
    assert everything["GOODPUT_PUSH_TOKEN"] == "s3cret"  # the default "ALL" is the caller's environment
    only = ctl.jobs[submit(script=SCRIPT, environment={"A": "1"}).submit()].environment
    assert only == {"SLURM_CONF": "/etc/slurm/slurm.conf", "A": "1"}
    assert ctl.jobs[submit(script=SCRIPT, user_id=1001).submit()].user_id == 1001  # root may


async def test_only_batch_jobs_with_a_script_are_resubmitted(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl, is_batch_job=False)
    with pytest.raises(PermanentSchedulerError, match="not a batch job"):
        await backend.resubmit_job("7", ResubmitRequest())
    running(ctl, 8)
    ctl.jobs[8].script = "  \n"
    with pytest.raises(PermanentSchedulerError, match="no batch script"):
        await backend.resubmit_job("8", ResubmitRequest())


