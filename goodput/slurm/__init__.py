"""Pure Slurm knowledge: command lines to run and parsers for what the commands print.

Every backend (local CLI, SSH, slurmrestd) shares these so that the same argv, the same
hostlist expansion and the same parsing rules apply whichever way goodput reaches Slurm. Nothing
here runs a process or opens a socket; `activities.adapters.slurm_*` does that.
"""
