"""storm-lab's command shims log `name arg1 arg2 arg3 @epoch`; one reader serves the command
counts, when each job's requeue was sent (#29) and the drain commands of the switch round."""

from __future__ import annotations

from pathlib import Path

from benchmarks import _storm_lab_rig as rig
from benchmarks._storm_jobs import drains

# As the shim's printf writes them: empty arguments leave their spaces; the last line predates the stamp.
LOG = ("scontrol requeue 1,2,3 @1796400000.25\n"
       "squeue --noheader -j @1796400000.5\n"
       "scontrol show job -o @1796400001\n"
       "scontrol update NodeName=node[1-2] State=DRAIN @1796400002\n"
       "scontrol requeuehold 3,4  @1796400003\n"
       "sinfo --json  \n")


def test_one_reader_gives_counts_requeue_times_and_drains(tmp_path: Path) -> None:
    log = tmp_path / "slurm-commands.log"
    log.write_text(LOG)
    assert rig.shim_commands(log)[0] == ("scontrol requeue 1,2,3", 1796400000.25)
    assert rig.shim_commands(log)[-1] == ("sinfo --json  ", None)
    assert rig.slurm_commands(log) == {"scontrol requeue": 1, "squeue --noheader": 1, "scontrol show job": 1,
                                       "scontrol update": 1, "scontrol requeuehold": 1, "sinfo --json": 1}
    # each job's first requeue: job 3 was in both
    assert rig.requeues_sent(log) == {"1": 1796400000.25, "2": 1796400000.25, "3": 1796400000.25,
                                      "4": 1796400003.0}
    shared = drains(log, "", 2)
    assert (shared["drain_commands"], shared["nodes_per_drain_command"]) == (1, [2])


def test_a_missing_log_is_no_commands(tmp_path: Path) -> None:
    missing = tmp_path / "none.log"
    assert rig.shim_commands(missing) == [] and rig.requeues_sent(missing) == {}
    assert drains(missing, "", 1)["drain_commands"] == 0
