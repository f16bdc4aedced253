"""The head-node systemd units (deploy/systemd): hardening, the commands they run, the environment file.

Besides reading the units, `systemd-analyze verify` and `systemd-analyze security --offline` check
them where systemd-analyze is installed (it needs no running systemd); they skip elsewhere, and
fail under GOODPUT_REQUIRE_SLURM=1 (CI installs it: tests/required.py).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from goodput.config import Settings
from tests.required import require_command
from workers.main import build_parser

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
COMMANDS = {"goodput-worker.service": "worker", "goodput-console.service": "console",
            "goodput-agent.service": "agent"}
# systemd-analyze security's exposure (0-10) times ten: 2.0 is "OK" and well under "MEDIUM".
MAX_EXPOSURE = 20


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections of key -> every value given (systemd allows a key more than once)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}: {line!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {line!r} is not KEY=VALUE"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


@pytest.mark.parametrize("unit", list(COMMANDS))
def test_unit_is_hardened(unit: str) -> None:
    service = parse_unit(UNITS / unit)["Service"]

    def one(key: str) -> str:
        assert key in service, f"{unit}: no {key}="
        return service[key][-1]  # the last assignment wins

    assert one("User") == "goodput" and one("Group") == "goodput"  # a dedicated user, never root
    assert one("NoNewPrivileges") == "yes"
    assert one("CapabilityBoundingSet") == "" and one("AmbientCapabilities") == ""
    assert one("ProtectSystem") == "strict"
    assert one("ProtectHome") in {"yes", "read-only"}
    assert one("PrivateTmp") == "yes"
    assert one("RestrictSUIDSGID") == "yes"
    assert one("SystemCallFilter") == "@system-service"
    # The only writable place: data_dir.
    assert one("StateDirectory") == "goodput" and one("WorkingDirectory") == "/var/lib/goodput"
    assert one("UMask") == "0077"
    assert one("Environment") and "GOODPUT_CONFIG=/etc/goodput/goodput.toml" in service["Environment"]
    assert one("EnvironmentFile") == "-/etc/goodput/goodput.env"
    assert "ReadWritePaths" not in service


@pytest.mark.parametrize(("unit", "command"), list(COMMANDS.items()))
def test_unit_runs_a_goodput_command(unit: str, command: str) -> None:
    (exec_start,) = parse_unit(UNITS / unit)["Service"]["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0] == "/opt/goodput/.venv/bin/goodput"
    args = build_parser().parse_args(argv[1:])
    assert args.command == command


@pytest.mark.parametrize("unit", list(COMMANDS))
def test_systemd_analyze_accepts_the_unit(unit: str, tmp_path: Path) -> None:
    analyze = require_command("systemd-analyze", "apt-get install -y systemd")
    # goodput is not installed under /opt here: point ExecStart at a binary that exists, so that
    # verify judges the unit rather than this machine.
    text = (UNITS / unit).read_text().replace("ExecStart=/opt/goodput/.venv/bin/goodput", "ExecStart=/bin/true")
    copy = tmp_path / unit
    copy.write_text(text)
    verify = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    security = subprocess.run([analyze, "security", "--offline=yes", f"--threshold={MAX_EXPOSURE}",
                               str(copy)], capture_output=True, text=True, timeout=60)
    assert security.returncode == 0, security.stdout[-2000:] + security.stderr


def test_environment_file_example_names_real_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every GOODPUT_ variable the example shows (commented out) is one goodput reads, and the
    example values (quoted as systemd would unquote them) load."""
    assigned = {}
    for line in (UNITS / "goodput.env.example").read_text().splitlines():
        body = line.removeprefix("# ").strip()
        key, sep, value = body.partition("=")
        if sep and key.isupper() and key.replace("_", "").isalnum():
            assigned[key] = value[1:-1] if value[:1] == value[-1:] == "'" else value
    assert {"GOODPUT_RESUBMIT_KEY", "GOODPUT_CONSOLE__USERS", "GOODPUT_CONSOLE__SESSION_SECRET",
            "GOODPUT_PUSH__TOKENS", "GOODPUT_NOTIFY_WEBHOOK_URL"} <= set(assigned)
    # Nothing is active by default: an empty value would be a value.
    assert not [line for line in (UNITS / "goodput.env.example").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    monkeypatch.setenv("GOODPUT_CONFIG", str(REPO / "deploy" / "goodput.toml.example"))
    for key, value in assigned.items():
        if key.startswith("GOODPUT_"):
            placeholder = "0123456789abcdef0123456789abcdef0123"
            monkeypatch.setenv(key, value.replace("<openssl rand -hex 32>", placeholder))
    settings = Settings()
    assert settings.console.users[0].name == "alice" and settings.push.tokens
    assert settings.resubmit_key is not None and settings.console.session_secret is not None
