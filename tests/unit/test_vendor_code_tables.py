"""The vendors' code tables (libibverbs' completion statuses, EFA's codes, Slurm's errors, NVML's
and DCGM's codes, MPI's error classes, the system's errno and getaddrinfo codes), each row in each spelling a
log uses: it reaches the row's rule (its own, or the generated one) and the reading's verdict, and
a hand-written rule a row names agrees with the reading. CUDA's table weighs its own rules
differently (they keep the code's category and drain only): `test_cuda_vendor_errors`."""

from __future__ import annotations

from typing import Any

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import (
    dcgm_errors,
    default_catalogue,
    efa_errors,
    errno_codes,
    mpi_errors,
    nvml_errors,
    slurm_errors,
    verbs_status,
)
from goodput.diagnose.signatures.dcgm_errors import DcgmError
from goodput.diagnose.signatures.efa_errors import EfaError
from goodput.diagnose.signatures.errno_codes import OsErrorCode
from goodput.diagnose.signatures.model import Role
from goodput.diagnose.signatures.mpi_errors import MpiError
from goodput.diagnose.signatures.nvml_errors import NvmlError
from goodput.diagnose.signatures.readings import DISTINCT_MESSAGE, CodeTable
from goodput.diagnose.signatures.slurm_errors import SlurmError
from goodput.diagnose.signatures.verbs_status import WcStatus

CAT = default_catalogue()
BY_ID = {s.id: s for s in CAT.signatures}


def verbs_spellings(status: WcStatus) -> dict[str, str]:
    out = {
        "nccl": (f"gpu-a12:4121:4188 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
                 f"10.3.0.17<52113> with status={status.code} opcode=1 len=0 vendor err 129 (Send) localGid "
                 "::ffff:10.3.0.12 remoteGids::ffff:10.3.0.17 hca mlx5_4"),
        "nccl-old": (f"gpu-a12:4121:4188 [3] NCCL WARN NET/IB : Got completion with error {status.code}, "
                     "opcode 1, len 0, vendor err 129"),
        "name": f"rdma_poll: completion failed: {status.name} (wr_id 17)",
        "ucx-verbs": (f"[clx-orion-097:26451:0:26451] rc_verbs_iface.c:63   FATAL: send completion with error: "
                      f"{status.message}"),
    }
    if status.ucx and status.syndrome is not None:
        out["ucx"] = (f"[cn12:2811:0:2840] ib_mlx5_log.c:171  {status.ucx} on mlx5_0:1/IB "
                      f"(synd 0x{status.syndrome:x} vend 0x81 hw_synd 0/0)")
    return out


def efa_spellings(error: EfaError) -> dict[str, str]:
    out = {
        "aws-ofi-nccl": (f"[2026-01-01 12:08:32] node-0-0:194:710 [0] int cm_req_handle_error_entry(...):46 NCCL WARN "
                         f"NET/OFI Request 0x7f456c222f60 completed with error. RC: 103. Error: {error.code} "
                         f"({error.message}) My EFA addr: fi_addr_efa://[fe80::c55:2eff:fe44:db5]:0:142160333"),
        "name": f"libfabric:4242:1700000000::efa:cq:efa_cq_handle_error(): prov_errno {error.name}",
    }
    if len(error.message) >= DISTINCT_MESSAGE:
        out["message"] = f"rank 3: transfer failed: {error.message}"
    return out


def slurm_spellings(error: SlurmError) -> dict[str, str]:
    out = {"name": f"pyslurm.core.error.RPCError: the request failed ({error.name})"}
    for i, message in enumerate(error.messages()):
        tag = "" if i == 0 else f"-older{i}"
        out |= {
            f"srun-step{tag}": f"srun: error: Unable to create step for job 81234: {message}",
            f"srun-alloc{tag}": f"srun: error: Unable to allocate resources: {message}",
            f"sbatch{tag}": f"sbatch: error: Batch job submission failed: {message}",
            f"salloc{tag}": f"salloc: error: Job submit/allocate failed: {message}",
            f"api{tag}": f"slurm_load_jobs error: {message}",
            f"plugin{tag}": f"srun: error: Couldn't load specified plugin name for mpi/pmix: {message}",
        }
        if len(message) >= DISTINCT_MESSAGE:
            out[f"slurmctld{tag}"] = f"[2026-12-05T10:11:12.123] _slurm_rpc_submit_batch_job: {message}"
    return out


def errno_spellings(error: OsErrorCode) -> dict[str, str]:
    out = {"name": f"connect to the rendezvous failed: {error.name}"}
    for i, message in enumerate(error.messages()):
        tag = "" if i == 0 else f"-older{i}"
        out[f"python{tag}"] = f"OSError: [Errno {error.code}] {message}"
        if error.alone:
            out[f"alone{tag}"] = f"fork: retry: {message}"
    return out


def nvml_spellings(error: NvmlError) -> dict[str, str]:
    library = error.library_message()
    return {
        "name": f"dcgmi: error reading GPU 3: {error.name}",
        "pynvml": f"pynvml.NVMLError_{error.pynvml}: {error.message}",
        "library": f"Failed to initialize NVML: {library}",
        "container-cli": f"nvidia-container-cli: initialization error: nvml error: {library.lower()}: unknown",
    }


def mpi_spellings(error: MpiError) -> dict[str, str]:
    return {
        "open-mpi": f"[nid001234:4242] *** {error.message}",
        "mpi4py": f"mpi4py.MPI.Exception: {error.message}",
    }


# What DCGM's printf fields print in these tests (DCGM's own formats; dcgm_errors reads them back).
DCGM_FIELDS = {"u": "3", "d": "2", "i": "2", "x": "1f", "X": "1F", "f": "1.5", "e": "1.20e-05", "E": "1.20E-05",
               "g": "1.5", "s": "CRC FLIT", "c": "x", "%": "%"}


def dcgm_filled(fmt: str) -> str:
    return dcgm_errors.PRINTF_CONVERSION.sub(
        lambda m: DCGM_FIELDS[m.group(3)] if "#" not in m.group(1) else "0x1f", fmt)


def dcgm_spellings(error: DcgmError) -> dict[str, str]:
    out = {"name": f'  "errorCode": "{error.name}",',
           "nvsentinel": f"HealthEvent GPU 3 check GpuMemWatch isFatal=true errorCode=[{error.name}]"}
    out |= {f"alias{i}": f"dcgm health: {alias}" for i, alias in enumerate(error.aliases)}
    for i, message in enumerate(error.messages()):
        tag = "" if i == 0 else f"-older{i}"
        out[f"health{tag}"] = f"|                           | {dcgm_filled(message)} |"
        out[f"diag{tag}"] = f"Error: {dcgm_filled(message)}"
    return out


# id prefix of the generated rules -> (table, how a log spells its rows)
TABLES: dict[str, tuple[CodeTable[Any], Any]] = {
    "ibv-wc": (verbs_status.load_table(), verbs_spellings),
    "efa-error": (efa_errors.load_table(), efa_spellings),
    "slurm-error": (slurm_errors.load_table(), slurm_spellings),
    "errno": (errno_codes.load_table(), errno_spellings),
    "nvml-error": (nvml_errors.load_table(), nvml_spellings),
    "mpi-error": (mpi_errors.load_table(), mpi_spellings),
    "dcgm-error": (dcgm_errors.load_table(), dcgm_spellings),
}
CASES = [(prefix, row, form, line) for prefix, (table, spell) in TABLES.items()
         for row in table.rows for form, line in spell(row).items()]


@pytest.mark.parametrize(("prefix", "row", "form", "line"), CASES,
                         ids=[f"{p}-{r.key()}-{f}" for p, r, f, _ in CASES])
def test_every_row_reaches_its_reading_in_every_spelling(prefix: str, row: Any, form: str, line: str) -> None:
    table = TABLES[prefix][0]
    reading = table.readings[row.reading]
    rule = row.signature or f"{prefix}-{row.key()}"
    hits = {m.signature.id for m in CAT.match_line(line, 1)}
    assert rule in hits, (form, hits)
    v = classify_lines([line])
    # A reading that only reports (its role is info) decides nothing on a line of its own.
    want = ("unknown", False, False) if reading.role is Role.INFO else (
        str(reading.category), reading.restart, reading.drain)
    assert (str(v.category), v.restart, v.drain) == want, (form, v.signatures)


@pytest.mark.parametrize("prefix", list(TABLES))
def test_a_rule_of_its_own_agrees_with_the_reading(prefix: str) -> None:
    table = TABLES[prefix][0]
    for row in table.rows:
        if row.signature:
            own, reading = BY_ID[row.signature], table.readings[row.reading]
            assert (own.category, own.restart, own.drain) == (reading.category, reading.restart, reading.drain), (
                row.code)


SHORT_SLURM = [row for row in slurm_errors.load_table().rows if len(row.message) < DISTINCT_MESSAGE]


@pytest.mark.parametrize("row", SHORT_SLURM, ids=[f"slurm-error-{r.code}" for r in SHORT_SLURM])
def test_a_short_slurm_message_is_read_only_after_a_clients_words(row: SlurmError) -> None:
    """`Invalid qos specification` or `Requested nodes are busy` in a program's own output is not
    Slurm's refusal; after `sbatch: error: Batch job submission failed: ` it is."""
    alone = f"[rank0]: ValueError: {row.message}"
    assert f"slurm-error-{row.code}" not in {m.signature.id for m in CAT.match_line(alone, 1)}


SLURM_ROWS = slurm_errors.load_table().rows


@pytest.mark.parametrize("row", SLURM_ROWS, ids=[f"slurm-error-{r.code}" for r in SLURM_ROWS])
def test_srun_waiting_for_a_step_is_no_failure_whatever_slurm_answered(row: SlurmError) -> None:
    """srun prints `retrying (<message>)` while it waits for its allocation's resources; only its
    `Unable to create step` ends the step (platform-026 of the corpus is a log of nothing else)."""
    line = f"srun: Job 81234 step creation temporarily disabled, retrying ({row.message})"
    assert {m.signature.id for m in CAT.match_line(line, 1)} == {"srun-step-creation-retrying"}
    v = classify_lines([line, line.replace("temporarily", "still"), "srun: Step created for StepId=81234.1"])
    assert (str(v.category), v.restart, v.drain) == ("unknown", False, False)


SHORT_ERRNO = [row for row in errno_codes.load_table().rows if not row.alone and not row.signature]


@pytest.mark.parametrize("row", SHORT_ERRNO, ids=[row.name for row in SHORT_ERRNO])
def test_a_common_errno_phrase_is_read_only_with_its_number(row: OsErrorCode) -> None:
    """`Permission denied (publickey)` or a tool's own `Connection timed out` is not the errno's word."""
    alone = f"node01: {row.message} (publickey,password)."
    assert f"errno-{row.key()}" not in {m.signature.id for m in CAT.match_line(alone, 1)}


def test_python_memory_error_is_host_memory_and_cudas_is_not_it() -> None:
    host = classify_lines(["Traceback (most recent call last):", "numpy.core._exceptions._ArrayMemoryError: "
                           "Unable to allocate 3.2 GiB for an array with shape (430000, 1000)"])
    assert (str(host.category), host.restart, "python-memory-error" in host.signatures) == ("oom", False, True)
    gpu = classify_lines(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    assert "python-memory-error" not in gpu.signatures


def test_a_pods_tolerations_are_not_a_node_that_went_away() -> None:
    """Every pod's `kubectl describe` lists the not-ready and unreachable taints it tolerates."""
    v = classify_lines(["Tolerations:     node.kubernetes.io/not-ready:NoExecute op=Exists for 300s",
                        "                 node.kubernetes.io/unreachable:NoExecute op=Exists for 300s"])
    assert (str(v.category), v.restart, v.drain, v.signatures) == ("unknown", False, False, ())


@pytest.mark.parametrize("warning", [
    "[W socket.cpp:697] [c10d] The IPv6 network addresses of (node01, 29500) cannot be retrieved (gai error: -3 - "
    "Temporary failure in name resolution).",
    "[W socket.cpp:697] [c10d] The IPv6 network addresses of (node01, 29500) cannot be retrieved (gai error: -2 - "
    "Name or service not known).",
    "[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already "
    "in use).",
    "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node01]:29500 (errno: 101 - Network is "
    "unreachable).",
    "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node01]:29500 (errno: 110 - Connection "
    "timed out).",
    "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node01]:29500 (errno: 113 - No route to "
    "host).",
    # The one errno the table does not read: dist-connection-lost read it and restarted a job that ran.
    "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node01]:29500 (errno: 111 - Connection "
    "refused).",
    "[W1203 10:00:00.000000 1 torch/csrc/distributed/c10d/socket.cpp:752] [c10d] The client socket has failed to "
    "connect to [node01]:29500 (errno: 104 - Connection reset by peer).",
])
def test_c10ds_retry_warnings_on_a_job_that_runs_decide_nothing(warning: str) -> None:
    """c10d warns while it tries each address of the master or retries a connection; the job then
    runs. Read as the system's errors these made a benign torchrun start a network fault to restart."""
    v = classify_lines([warning, "iteration 100/1000 | lm loss 2.31 | elapsed time per iteration (ms): 812.4"])
    assert not any(s.startswith("errno-") for s in v.signatures), v.signatures
    assert (v.restart, v.drain) == (False, False)


def test_c10ds_connect_ends_with_its_own_error_not_with_a_retry_warning() -> None:
    v = classify_lines([
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node01]:29500 (errno: 111 - "
        "Connection refused).",
        "torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of "
        "(node01, 29500). The client socket has failed to connect to [node01]:29500 (errno: 111 - Connection "
        "refused)."])
    assert "c10d-store-connect-failed" in v.signatures


def test_dcgms_formats_read_back_what_they_print_and_only_that() -> None:
    from goodput.untrusted_text import LinearRegex

    rx = LinearRegex(dcgm_errors.format_pattern("Detected %ld %s NvLink errors on GPU %u's NVLink which exceeds "
                                                "threshold of %u"))
    assert rx.search_spans(b"Detected 12 CRC FLIT NvLink errors on GPU 3's NVLink which exceeds threshold of 100")
    assert rx.search_spans(b"Detected twelve CRC FLIT NvLink errors on GPU 3's NVLink which exceeds threshold "
                           b"of 100") is None
    # A string at either end adds nothing: the phrase between is what names the code.
    assert dcgm_errors.format_pattern("%s met or exceeded the threshold of %lu per second: %lu at %.1f seconds "
                                      "into the test.").startswith("met\\ or\\ exceeded")
    assert dcgm_errors.longest_phrase("GPU %u had memory errors and row remappings are pending") == (
        "had memory errors and row remappings are pending")


@pytest.mark.parametrize("line", [
    "Persistence mode for GPU 0 is disabled.",
    "Error: The Diagnostic test is skipped.",
    '  "errorCode": "DCGM_FR_PERSISTENCE_MODE",',
    "Found CUDA performance-limiting environment variable 'CUDA_LAUNCH_BLOCKING'.",
])
def test_dcgms_findings_about_the_diagnostic_itself_decide_nothing(line: str) -> None:
    """DCGM's CONFIG codes are about the test run (its settings, its access), not a GPU."""
    v = classify_lines([line])
    assert (str(v.category), v.restart, v.drain) == ("unknown", False, False), v.signatures
