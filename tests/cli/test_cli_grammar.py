"""The command line's conventions, without a server: help everywhere, grouping, usage errors, exit
codes, one-line errors, --version, completion, docs/cli.md and a --help that imports nothing heavy."""

from __future__ import annotations

import argparse
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from goodput.checkpoints import LAYOUTS
from goodput.checkpoints.model import DEFAULT_SETTLE_S
from goodput.cli.grammar import commands, options
from goodput.cli.trust import REASON_KINDS
from goodput.models import AnomalyKind, Category, Mode
from tests.helpers import free_port
from workers import cli_docs, cli_parser, main
from workers.cli_parser import GROUPS, build_parser

pytestmark = pytest.mark.timeout(60)
GOODPUT = [sys.executable, "-c", "from workers.main import main; main()"]
ROOT = Path(__file__).resolve().parents[2]
PARSER = build_parser()
COMMANDS = dict(commands(PARSER))


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GOODPUT, *args], env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=30, check=False)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_a_description_an_example_and_help_on_every_argument(name: str) -> None:
    sub = COMMANDS[name]
    summary, _, body = (sub.description or "").partition("\n\n")
    assert summary and body.strip(), f"{name}: no description"
    example = (sub.epilog or "").splitlines()
    assert example[:1] == ["example:"] and f"goodput {name}" in example[1], f"{name}: no example"
    unhelped = [a.dest for a in sub._actions if not a.help]
    assert not unhelped, f"{name}: arguments without help: {unhelped}"


def test_the_top_level_help_lists_every_command_under_what_operators_do() -> None:
    epilog = PARSER.epilog or ""
    listed = {line.split()[0] for line in epilog.splitlines() if line.startswith("    ")}
    assert listed == set(COMMANDS)
    for group in GROUPS:
        assert f"  {group}:\n" in epilog
    assert "exit codes:" in epilog and "JSON Lines" in epilog


def test_the_written_out_choices_are_the_enums() -> None:
    """The parser spells them out to stay light; they must not drift from the models."""
    assert tuple(m.value for m in Mode) == cli_parser.MODES
    assert REASON_KINDS == cli_parser.REASON_KINDS
    assert tuple(c.value for c in Category) == cli_parser.CATEGORIES
    assert tuple(k.value for k in AnomalyKind) == cli_parser.KINDS
    assert tuple(LAYOUTS) == cli_parser.LAYOUTS
    assert cli_parser.DEFAULT_SETTLE_S == DEFAULT_SETTLE_S


def test_help_imports_nothing_heavy() -> None:
    probe = ("import sys; sys.argv = ['goodput', '--help']\n"
             "from workers.main import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "heavy = {'temporalio', 'pydantic', 'pydantic_settings', 'starlette', 'rich', 'httpx'}\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & heavy), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and "usage: goodput" in done.stdout
    assert done.stderr.strip() == "[]", done.stderr


def test_global_options_go_before_or_after_the_command() -> None:
    """The README's `goodput worker --temporal HOST:PORT`."""
    after = PARSER.parse_args(["worker", "--temporal", "t.example:7233", "--namespace", "ns", "--log-level", "debug"])
    before = PARSER.parse_args(["--temporal", "t.example:7233", "--namespace", "ns", "--log-level", "debug", "worker"])
    assert vars(after) == vars(before)
    assert after.temporal == "t.example:7233" and after.command == "worker"
    assert PARSER.parse_args(["incidents"]).temporal is None


def test_one_time_syntax() -> None:
    assert PARSER.parse_args(["audit", "--since", "24h"]).since == "24h"
    assert PARSER.parse_args(["audit", "--since", "2026-01-02T03:04:05"]).since == "2026-01-02T03:04:05"
    assert PARSER.parse_args(["advise", "--job", "1", "--since", "7d"]).since == "7d"
    assert PARSER.parse_args(["advise", "--job", "1", "--window", "7d"]).since == "7d"  # the old spelling
    assert PARSER.parse_args(["faults", "--window", "10m"]).window == "10m"
    assert PARSER.parse_args(["faults", "--window", "2.5"]).window == "150s"  # bare minutes, as before
    assert PARSER.parse_args(["audit", "--json"]).json
    assert PARSER.parse_args(["audit", "--format", "jsonl"]).format == "jsonl"  # hidden alias


@pytest.mark.parametrize("args", [("audit", "--since", "yesterday"), ("faults", "--window", "10x"),
                                  ("inject", "--mode", "yolo"), ("approve", "inc-1"), ("no-such-command",), ()])
def test_a_usage_error_is_exit_2_and_one_line(args: tuple[str, ...]) -> None:
    done = run(*args)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "error:" in done.stderr, done.stderr


def test_an_unavailable_service_is_exit_3_without_the_clients_internals(tmp_path: Path) -> None:
    done = run("incidents", env={"GOODPUT_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
                                 "GOODPUT_CONFIG": str(tmp_path / "none.toml")})
    assert done.returncode == 3
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert "cannot reach Temporal" in done.stderr and "goodput up" in done.stderr
    for internal in ("tonic", "transport", "ConnectError", "Os {"):
        assert internal not in done.stderr, done.stderr


def test_findings_are_exit_1(tmp_path: Path) -> None:
    (tmp_path / "not-a-checkpoint").write_text("x")
    assert run("checkpoints", str(tmp_path)).returncode == 1


def test_a_crash_is_exit_70_and_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def crash(args: argparse.Namespace) -> int:
        raise KeyError("a bug\nover two lines")

    monkeypatch.setitem(main.OFFLINE, "classify", crash)
    assert main.dispatch(["classify", "x.log"]) == 70
    err = capsys.readouterr().err
    assert err.startswith("error: internal error in goodput classify: KeyError") and err.count("\n") == 1, err


def test_a_long_error_is_one_line_off_a_terminal(tmp_path: Path) -> None:
    missing = tmp_path / ("a-rather-long-directory-name-" * 6) / "anomaly.json"
    done = run("inject", "--file", str(missing), env={"GOODPUT_CONFIG": str(tmp_path / "none.toml"),
                                                      "GOODPUT_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"})
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and str(missing) in done.stderr, done.stderr


def test_version_says_what_it_can_and_never_fails(tmp_path: Path) -> None:
    done = run("--version", env={"GOODPUT_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
                                 "GOODPUT_CONFIG": str(tmp_path / "none.toml"), "PATH": "/nonexistent"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("goodput ") and "unreachable at 127.0.0.1:" in done.stdout
    assert "slurm: not found" in done.stdout
    broken = run("--version", env={"GOODPUT_POLICY__MODE": "nonsense", "GOODPUT_CONFIG": str(tmp_path / "none.toml")})
    assert broken.returncode == 0 and "settings unreadable" in broken.stdout, broken.stdout + broken.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_is_generated_and_names_every_command(shell: str) -> None:
    done = run("completion", shell)
    assert done.returncode == 0, done.stderr
    for name in COMMANDS:
        assert name in done.stdout
    flag = "-l {}" if shell == "fish" else "--{}"
    assert flag.format("dry-run") in done.stdout and flag.format("json") in done.stdout


def test_the_bash_completion_completes(tmp_path: Path) -> None:
    script = tmp_path / "goodput.bash"
    script.write_text(run("completion", "bash").stdout)
    probe = (f"source {script}; COMP_WORDS=(goodput kill); COMP_CWORD=1; _goodput_complete; echo ${{COMPREPLY[@]}};"
             " COMP_WORDS=(goodput breaker ''); COMP_CWORD=2; _goodput_complete; echo ${COMPREPLY[@]}")
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30, check=False)
    first, second = done.stdout.splitlines()
    assert first == "kill-switch"
    assert {"--dry-run", "--reason", "status", "reset"} <= set(second.split())


def test_docs_cli_md_is_the_parsers() -> None:
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == cli_docs.text(), "docs/cli.md drifted: python -m workers.cli_docs > docs/cli.md"
    for name in COMMANDS:
        assert f"## goodput {name}\n" in committed


def test_every_flag_shown_has_help() -> None:
    """Hidden aliases (audit --format) are left out of help, docs and completion alike."""
    assert all(a.help for a in options(PARSER))
    assert "--format" not in json.dumps([a.option_strings for a in options(COMMANDS["audit"])])


def stderr_on_a_terminal(*args: str) -> tuple[int, str]:
    """Run goodput with stderr on a pseudo-terminal; what it wrote there."""
    main_fd, term_fd = pty.openpty()
    proc = subprocess.Popen([*GOODPUT, *args], stdout=subprocess.DEVNULL, stderr=term_fd,
                            env={**os.environ, "TERM": "xterm", "COLUMNS": "120"})
    os.close(term_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the terminal's last writer exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    return proc.wait(timeout=30), b"".join(chunks).decode(errors="replace")


def test_checkpoints_shows_progress_on_a_terminal_and_nothing_off_it() -> None:
    tree = str(ROOT / "tests/fixtures/checkpoints/lightning")
    code, shown = stderr_on_a_terminal("checkpoints", tree)
    assert code == 0 and "entries read" in shown, shown
    quiet = run("checkpoints", tree)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_log_level_debug_shows_a_crashs_traceback(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    def crash(args: argparse.Namespace) -> int:
        raise KeyError("a bug")

    monkeypatch.setitem(main.OFFLINE, "classify", crash)
    assert main.dispatch(["classify", "x.log"]) == 70
    assert "Traceback" not in capsys.readouterr().err
    assert main.dispatch(["classify", "x.log", "--log-level", "debug"]) == 70
    assert "Traceback" in capsys.readouterr().err
