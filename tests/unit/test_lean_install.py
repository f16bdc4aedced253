"""A lean install (no extras) imports and starts everything but the modes that need an extra.

Each case runs in a fresh interpreter whose import system refuses the extras' modules, as an
install without them would; it proves the optional packages are imported only when their mode is
chosen, and that choosing one without it names the extra to install.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = ("asyncssh", "grpc", "hyperscan", "opentelemetry.exporter.otlp", "aiohttp")
    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ModuleNotFoundError(f"No module named {name!r} (lean install)")
            return None
    sys.meta_path.insert(0, Refuse())
""")
# Modules that exist to serve an extra, and nothing else.
EXTRA_ONLY = {"activities.adapters.slurm_ssh", "workers.nvsentinel.grpc_receiver",
              "activities.adapters.nvsentinel.proto.health_event_pb2_grpc"}


def _run(body: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(body)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def _modules() -> list[str]:
    found = []
    for package in ("goodput", "workflows", "activities", "workers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            if name not in EXTRA_ONLY and not name.endswith("__main__"):
                found.append(name)
    return found


def test_every_module_but_the_extras_own_imports_without_them() -> None:
    result = _run(f"""
        import importlib
        failed = []
        for name in {_modules()!r}:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                failed.append(f"{{name}}: {{exc}}")
        print("\\n".join(failed))
        sys.exit(1 if failed else 0)
    """)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("setup", "extra"), [
    ("from goodput.config import Settings\n"
     "from workers.worker import scheduler_from\n"
     "scheduler_from(Settings(scheduler='slurm-ssh', slurm={'ssh_host': 'login1'}))", "ssh"),
    ("from workers.telemetry import setup_tracing\n"
     "setup_tracing('http://127.0.0.1:4318')", "otlp"),
    ("from goodput.detect.nvsentinel import NvSentinelPushBack\n"
     "from activities.adapters.nvsentinel import VerdictPushBack\n"
     "VerdictPushBack(None, NvSentinelPushBack(enabled=True, target='127.0.0.1:1'))", "nvsentinel"),
])
def test_a_mode_that_needs_an_extra_names_it(setup: str, extra: str) -> None:
    result = _run(f"""
        from goodput.extras import MissingExtraError
        try:
{textwrap.indent(setup, " " * 12)}
        except MissingExtraError as exc:
            print(exc)
            sys.exit(3)
    """)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"pip install 'goodput[{extra}]'" in result.stdout
