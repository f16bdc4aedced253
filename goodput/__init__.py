"""goodput's domain: models, rules, policy and the pure parts of the CLI.

Nothing in this package talks to Temporal, Slurm, HTTP or GPUs; import-linter enforces it.
"""

__version__ = "0.1.0"
