"""Adapters: the only code that talks to Slurm, NVML, HTTP and SSH."""
