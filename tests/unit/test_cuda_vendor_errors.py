"""CUDA's error codes as data: every code in `data/vendor/cuda-errors.toml` reaches its documented
decision whichever way a log spells it (its runtime or driver name, or its message after PyTorch's,
NCCL's or TensorRT-LLM's words), and an undecided code never decides a verdict."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.diagnose.signatures.cuda_errors import CudaError, load_table
from goodput.diagnose.signatures.model import Role
from goodput.diagnose.signatures.readings import parse_code_table

CAT = default_catalogue()
TABLE = load_table()
BY_ID = {s.id: s for s in CAT.signatures}
ERRORS = TABLE.rows
DECIDED = [e for e in ERRORS if e.signature or TABLE.readings[e.reading].role is not Role.INFO]
UNDECIDED = [e for e in ERRORS if e not in DECIDED]


def forms(error: CudaError) -> dict[str, str]:
    out = {
        "pytorch": f"RuntimeError: CUDA error: {error.message}",
        "nccl": f"gpu-node-7:2211:2290 [3] enqueue.cc:1672 NCCL WARN Cuda failure {error.code} '{error.message}'",
        "trtllm": f"[TensorRT-LLM][ERROR] CUDA runtime error in cudaMemcpyAsync(dst, src, n): {error.message} "
                  "(/src/cpp/tensorrt_llm/runtime/bufferManager.cpp:83)",
        "samples": f'CUDA error at train.cu:42 code={error.code}({error.runtime}) "cudaDeviceSynchronize()"',
    }
    if error.driver:
        out["driver"] = f"E1205 10:00:00.123456 4242 cuda_executor.cc:210] failed call to cuInit: {error.driver}"
    return out


def decision(error: CudaError) -> tuple[str, bool, bool]:
    reading = TABLE.readings[error.reading]
    return str(reading.category), reading.restart, reading.drain


def _cases(errors: list[CudaError]) -> list[tuple[CudaError, str, str]]:
    return [(e, name, line) for e in errors for name, line in forms(e).items()]


@pytest.mark.parametrize(("error", "form", "line"), _cases(DECIDED),
                         ids=[f"{e.runtime}-{f}" for e, f, _ in _cases(DECIDED)])
def test_every_decided_code_reaches_its_decision_in_every_spelling(error: CudaError, form: str, line: str) -> None:
    v = classify_lines([line])
    if error.signature:
        # A rule of its own weighs more than the code (whether to rerun depends on who holds the
        # memory, which GPU erred): the code's category and drain are what it must keep.
        own = BY_ID[error.signature]
        assert (str(v.category), v.drain) == (str(own.category), own.drain), (form, v.signatures)
        return
    assert (str(v.category), v.restart, v.drain) == decision(error), (form, v.signatures)


@pytest.mark.parametrize(("error", "form", "line"), _cases(UNDECIDED),
                         ids=[f"{e.runtime}-{f}" for e, f, _ in _cases(UNDECIDED)])
def test_an_undecided_code_is_reported_and_decides_nothing(error: CudaError, form: str, line: str) -> None:
    hits = CAT.match_line(line, 1)
    assert f"cuda-error-{error.code}" in {m.signature.id for m in hits}
    if form == "pytorch":
        # The exception is still the program's; the code's meaning only rides along.
        assert str(classify_lines([line]).category) == "app-error"
        return
    v = classify_lines([line])
    assert (str(v.category), v.restart, v.drain) == ("unknown", False, False)


def test_the_table_is_a_vendor_table_with_a_source_and_no_duplicates() -> None:
    assert TABLE.url.startswith("https://docs.nvidia.com/cuda/")
    codes = [e.code for e in ERRORS]
    assert len(codes) == len(set(codes)) >= 50
    generated = [s for s in CAT.signatures if s.id.startswith("cuda-error-")]
    assert len(generated) == sum(1 for e in ERRORS if not e.signature)
    assert all(s.source and "cudaError" in s.source for s in generated)
    assert not any(s.drain for s in generated), "no CUDA code alone names a node to drain"


def test_a_rule_of_its_own_must_exist_and_a_reading_must_be_weighed() -> None:
    assert {e.signature for e in ERRORS if e.signature} <= BY_ID.keys()
    doc = {"source": {"document": "d", "url": "u", "version": "v"},
           "reading": {}, "error": [{"code": 9, "runtime": "cudaErrorInvalidConfiguration",
                                     "message": "invalid configuration argument", "reading": "program",
                                     "meaning": "m"}]}
    with pytest.raises(ValueError, match="no weighing"):
        parse_code_table(doc, CudaError, "error")


def test_a_bare_message_without_a_cuda_wrapper_is_not_read() -> None:
    # "invalid resource handle" is also a phrase of other libraries; only CUDA's words make it CUDA's.
    line = "ValueError: invalid resource handle for storage bucket"
    assert "cuda-error-400" not in {m.signature.id for m in CAT.match_line(line, 1)}
    assert BY_ID["cuda-error-400"].regex.search_text(line) is None
    assert "{cuda_said}" in next(e for e in ERRORS if e.code == 400).pattern()


def test_peer_access_unsupported_from_nccl_is_the_configuration_not_the_node() -> None:
    v = classify_lines(["h1:77:91 [1] transport/p2p.cc:275 NCCL WARN Cuda failure 217 "
                        "'peer access is not supported between these two devices'",
                        "h1:77:91 [1] NCCL INFO transport/p2p.cc:344 -> 1",
                        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error "
                        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"])
    assert (str(v.category), v.restart, v.drain) == ("app-error", False, False)
    assert "cuda-error-217" in v.signatures


def test_undecided_codes_are_info_and_generic() -> None:
    for e in UNDECIDED:
        sig = BY_ID[f"cuda-error-{e.code}"]
        assert sig.role is Role.INFO and sig.generic and not sig.settles
