"""goodput's Slurm prolog and epilog (deploy/slurm/), run directly with a fake Slurm environment.

What slurmd would give them is set by hand (the variables of Slurm 22.05's prolog environment),
nvidia-smi is a small fake named in the settings file, and goodput's push endpoint is a loopback
HTTP server that records what arrives. Whatever goes wrong -- goodput down, silent, refusing; an
nvidia-smi that hangs; hostile values -- the script exits 0 within its time bound, and what it
sends is a record goodput's own parser accepts.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from goodput.detect.push import PushConfig
from goodput.detect.push.layout import LayoutRecord, node_layout, parse_layout
from tests.required import require_command

REPO = Path(__file__).resolve().parents[2]
PROLOG = REPO / "deploy" / "slurm" / "goodput-prolog.sh"
EPILOG = REPO / "deploy" / "slurm" / "goodput-epilog.sh"
TOKEN = "prolog-test-token-0123456789"
# The bound every run must meet: nvidia-smi 3 s (+1 s to kill it) and the POST 2 s (+1 s), with slack.
BOUND_S = 9.0

SMI = """#!/bin/bash
cat <<'OUT'
0, 00000000:1B:00.0, GPU-0a0a0a0a-1111-2222-3333-444444444440, 1652000000010
1, 00000000:3B:00.0, GPU-0a0a0a0a-1111-2222-3333-444444444441, [N/A]
2, 00000000:5B:00.0, GPU-0a0a0a0a-1111-2222-3333-444444444442, 1652000000012
3, 00000000:7B:00.0, GPU-0a0a0a0a-1111-2222-3333-444444444443, 1652000000013
OUT
"""


@dataclass
class Endpoint:
    """A loopback stand-in for goodput's push endpoint: records each request, answers `status`."""

    port: int
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    status: int = 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def records(self) -> list[LayoutRecord]:
        return [parse_layout(body, PushConfig(), cluster="lab")[1] for _, _, body in self.requests]


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    state = Endpoint(port=0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.requests.append((self.path, dict(self.headers.items()), body))
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": "refused by the test"}' if state.status != 200 else b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts connections (the kernel does) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def settings(tmp_path: Path, url: str, *, smi: Path | None = None, mode: int = 0o600, extra: str = "") -> Path:
    path = tmp_path / "prolog.env"
    lines = [f"GOODPUT_PUSH_URL={url}", f"GOODPUT_PUSH_TOKEN={TOKEN}"]
    if smi is not None:
        lines.append(f"NVIDIA_SMI={smi}")
    path.write_text("\n".join(lines) + "\n" + extra)
    path.chmod(mode)
    return path


def slurm_env(env_file: Path, **changes: str | None) -> dict[str, str]:
    """What slurmd 22.05 gives a prolog (no PATH: the script sets its own), plus the settings path."""
    env = {"GOODPUT_PROLOG_ENV": str(env_file), "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242",
           "SLURMD_NODENAME": "node2", "SLURM_NODELIST": "node[1-3]", "SLURM_JOB_GPUS": "2,0",
           "CUDA_VISIBLE_DEVICES": "2,0", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1001",
           "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_RESTART_COUNT": "1", "SLURM_CLUSTER_NAME": "lab",
           "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_COMMENT": "goodput:opt-in",
           "SLURM_JOB_WORK_DIR": "/home/alice"}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run(script: Path, env: dict[str, str], *, pass_fds: tuple[int, ...] = ()
        ) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    result = subprocess.run(["/bin/bash", str(script)], env=env, text=True, capture_output=True, timeout=30,
                            check=False, pass_fds=pass_fds)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    assert elapsed < BOUND_S, f"took {elapsed:.1f} s"
    return result, elapsed


# -- the files ------------------------------------------------------------------------------------

def test_the_scripts_are_what_slurmd_and_slinky_can_run() -> None:
    text = PROLOG.read_bytes()
    assert text.startswith(b"#!/bin/bash\n") and b"\r" not in text and text.endswith(b"\n")
    assert os.access(PROLOG, os.X_OK)
    assert EPILOG.resolve() == PROLOG.resolve()  # one implementation; the name (or Slurm) says which
    subprocess.run(["bash", "-n", str(PROLOG)], check=True)


def test_shellcheck_is_clean() -> None:
    shellcheck = require_command("shellcheck", "apt-get install -y shellcheck")
    result = subprocess.run([shellcheck, "--severity=style", str(PROLOG)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


# -- what reaches goodput -----------------------------------------------------------------------

def test_the_prolog_sends_the_nodes_layout(tmp_path: Path, endpoint: Endpoint) -> None:
    smi = executable(tmp_path / "nvidia-smi", SMI)
    result, _ = run(PROLOG, slurm_env(settings(tmp_path, endpoint.url, smi=smi)))
    assert result.stderr == ""
    [(path, headers, _)] = endpoint.requests
    assert path == "/v1/layout"
    assert headers["Authorization"] == f"Bearer {TOKEN}" and headers["Content-Type"] == "application/json"
    [record] = endpoint.records()
    assert (record.event, record.job_id, record.restart_count, record.node, record.nodelist) == (
        "prolog", "4242", 1, "node2", "node[1-3]")
    # Slurm's order (local rank 0 uses GPU 2), each with what nvidia-smi says about it; `[N/A]` is no serial.
    assert [(g.index, g.pci_bus_id, g.uuid, g.serial) for g in record.gpus] == [
        (2, "00000000:5B:00.0", "GPU-0a0a0a0a-1111-2222-3333-444444444442", "1652000000012"),
        (0, "00000000:1B:00.0", "GPU-0a0a0a0a-1111-2222-3333-444444444440", "1652000000010")]
    assert (record.check.status, record.check.detail) == ("ok", "nvidia-smi lists 4 GPUs")
    assert node_layout(record, datetime.now(UTC)).node_index == 1


def test_the_epilog_by_name_and_by_slurms_context(tmp_path: Path, endpoint: Endpoint) -> None:
    env_file = settings(tmp_path, endpoint.url, smi=tmp_path / "absent", extra="GOODPUT_CLUSTER=lab\n")
    run(EPILOG, slurm_env(env_file, SLURM_SCRIPT_CONTEXT=None))
    run(PROLOG, slurm_env(env_file, SLURM_SCRIPT_CONTEXT="epilog_slurmd"))
    records = endpoint.records()
    assert [r.event for r in records] == ["epilog", "epilog"] and {r.cluster for r in records} == {"lab"}
    # No nvidia-smi: the check is skipped, which is no failure.
    assert {(r.check.status, r.check.detail) for r in records} == {("skipped", f"{tmp_path}/absent is not executable")}
    assert [g.index for g in records[0].gpus] == [2, 0]


@pytest.mark.parametrize(("smi", "expected", "status", "detail"), [
    ("#!/bin/bash\necho '0, 00000000:1B:00.0, GPU-0a0a0a0a-0000, 1'\n", {}, "failed",
     "nvidia-smi does not list GPU 2 that Slurm allocated here"),
    ("#!/bin/bash\nexit 9\n", {}, "failed", "nvidia-smi failed (exit status 9)"),
    (SMI, {"GOODPUT_NODE_GPUS": "8"}, "failed", "nvidia-smi lists 4 GPUs, 8 expected"),
])
def test_the_node_check_says_what_is_wrong(tmp_path: Path, endpoint: Endpoint, smi: str,
                                           expected: dict[str, str], status: str, detail: str) -> None:
    extra = "".join(f"{k}={v}\n" for k, v in expected.items())
    run(PROLOG, slurm_env(settings(tmp_path, endpoint.url, smi=executable(tmp_path / "smi", smi), extra=extra)))
    [record] = endpoint.records()
    assert (record.check.status, record.check.detail) == (status, detail)


# -- failing open, fast -------------------------------------------------------------------------

def test_goodput_down_is_one_line_and_exit_0(tmp_path: Path) -> None:
    result, elapsed = run(PROLOG, slurm_env(settings(tmp_path, f"http://127.0.0.1:{closed_port()}")))
    assert elapsed < 2 and len(result.stderr.splitlines()) == 1
    assert "goodput did not take the layout" in result.stderr and "job 4242 on node2" in result.stderr


def test_goodput_silent_costs_the_post_timeout_only(tmp_path: Path, black_hole: int) -> None:
    result, elapsed = run(PROLOG, slurm_env(settings(tmp_path, f"http://127.0.0.1:{black_hole}")))
    assert 1.5 < elapsed < 4.5 and "goodput did not take the layout" in result.stderr


def test_goodput_refusing_is_logged_with_its_reason(tmp_path: Path, endpoint: Endpoint) -> None:
    endpoint.status = 400
    result, _ = run(PROLOG, slurm_env(settings(tmp_path, endpoint.url)))
    assert "HTTP 400" in result.stderr and "refused by the test" in result.stderr


def test_a_hanging_nvidia_smi_is_cut_off(tmp_path: Path, endpoint: Endpoint) -> None:
    smi = executable(tmp_path / "smi", "#!/bin/bash\ntrap '' TERM\nsleep 60\n")
    _, elapsed = run(PROLOG, slurm_env(settings(tmp_path, endpoint.url, smi=smi)))
    # Cut off: it waited out its 3 s limit and then did not wait for the 60 s sleep (the bound is far from
    # both, so a loaded machine cannot make it flaky).
    assert 2.5 < elapsed < 30
    [record] = endpoint.records()
    assert (record.check.status, record.check.detail) == ("failed", "nvidia-smi did not answer within 3 s")


def test_nothing_left_behind_holds_slurmds_descriptors(tmp_path: Path, endpoint: Endpoint) -> None:
    """slurmd reads the prolog's output until it closes: a leftover process of nvidia-smi's (here a
    daemon it starts) must not keep that pipe, or any other descriptor the prolog inherited, open."""
    pid_file = tmp_path / "daemon.pid"
    daemon = f"#!/bin/bash\nsetsid sleep 30 &\necho $! > {pid_file}\n"
    smi = executable(tmp_path / "smi", daemon + SMI.split("\n", 1)[1])
    extra_read, extra_write = os.pipe()
    try:
        run(PROLOG, slurm_env(settings(tmp_path, endpoint.url, smi=smi)), pass_fds=(extra_write,))
        os.close(extra_write)
        extra_write = -1
        os.set_blocking(extra_read, False)
        assert os.read(extra_read, 1) == b""  # every writer gone: EOF, not EAGAIN
    finally:
        os.close(extra_read)
        if extra_write >= 0:
            os.close(extra_write)
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert endpoint.records()[0].check.status == "ok"


@pytest.mark.parametrize(("why", "mode", "text"), [
    ("missing", None, None),
    ("readable by others", 0o644, None),
    ("no token", 0o600, "GOODPUT_PUSH_URL=http://127.0.0.1:1\n"),
    ("not a URL", 0o600, "GOODPUT_PUSH_URL=$(touch {marker})\nGOODPUT_PUSH_TOKEN=" + TOKEN + "\n"),
    ("a token with quotes", 0o600, 'GOODPUT_PUSH_URL=http://127.0.0.1:1\nGOODPUT_PUSH_TOKEN=abc"def\\"0123456789\n'),
])
def test_bad_settings_send_nothing_and_run_nothing(tmp_path: Path, why: str, mode: int | None,
                                                   text: str | None) -> None:
    marker = tmp_path / "executed"
    path = tmp_path / "prolog.env"
    if mode is not None:
        path.write_text(text.format(marker=marker) if text else f"GOODPUT_PUSH_URL=http://127.0.0.1:1\n"
                        f"GOODPUT_PUSH_TOKEN={TOKEN}\n")
        path.chmod(mode)
    result, elapsed = run(PROLOG, slurm_env(path))
    assert elapsed < 2 and len(result.stderr.splitlines()) == 1, why
    assert not marker.exists()


# -- hostile values -------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [
    {"SLURM_JOB_ID": "4242;touch {marker}"}, {"SLURM_JOB_ID": "../4242"}, {"SLURM_JOB_ID": "4242\n"},
    {"SLURM_JOB_ID": None}, {"SLURMD_NODENAME": "../../etc/passwd"}, {"SLURMD_NODENAME": "node2\nnode3"},
    {"SLURMD_NODENAME": "$(touch {marker})"}, {"SLURM_NODELIST": 'node[1-3]","node":"node9'},
    {"SLURM_NODELIST": "x" * 20000},
])
def test_hostile_slurm_values_send_nothing(tmp_path: Path, endpoint: Endpoint, changes: dict[str, str | None]) -> None:
    marker = tmp_path / "executed"
    env = slurm_env(settings(tmp_path, endpoint.url),
                    **{k: v.format(marker=marker) if v else v for k, v in changes.items()})
    result, _ = run(PROLOG, env)
    assert endpoint.requests == [] and not marker.exists()
    assert len(result.stderr.splitlines()) == 1


def test_the_jobs_own_words_never_reach_the_record(tmp_path: Path, endpoint: Endpoint) -> None:
    marker = tmp_path / "executed"
    smi = executable(tmp_path / "smi", SMI)
    hostile = f'"}},"node":"node9","x":"$(touch {marker})`touch {marker}`'
    env = slurm_env(settings(tmp_path, endpoint.url, smi=smi), SLURM_JOB_COMMENT=hostile, SLURM_JOB_NAME=hostile,
                    SLURM_JOB_WORK_DIR=hostile, SLURM_JOB_GPUS="0,1;touch x", CUDA_VISIBLE_DEVICES="GPU-1,GPU-2",
                    SLURM_JOB_RESTART_COUNT="1e9", GOODPUT_PUSH_URL="http://127.0.0.1:1", NVIDIA_SMI="/bin/false")
    run(PROLOG, env)
    [(_, _, body)] = endpoint.requests
    assert b"node9" not in body and b"touch" not in body and not marker.exists()
    [record] = endpoint.records()
    assert (record.node, record.gpus, record.restart_count) == ("node2", (), 0)


def test_hostile_nvidia_smi_output_is_dropped_field_by_field(tmp_path: Path, endpoint: Endpoint) -> None:
    smi = executable(tmp_path / "smi", """#!/bin/bash
echo '0, 00000000:1B:00.0","node":"node9, GPU-0a0a0a0a-0000, 1'
echo '2, 00000000:5B:00.0, GPU-"injected", serial with spaces and "quotes"'
echo 'junk line'
""")
    run(PROLOG, slurm_env(settings(tmp_path, endpoint.url, smi=smi)))
    [record] = endpoint.records()
    assert [(g.index, g.pci_bus_id, g.uuid, g.serial) for g in record.gpus] == [
        (2, "00000000:5B:00.0", None, None), (0, None, None, None)]
