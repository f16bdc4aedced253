"""`nvidia-smi -q`'s ECC counts: only the Volatile section's uncorrectable ones convict a GPU.

nvidia-smi prints the same keys under `Volatile` (since the driver loaded) and `Aggregate` (the
GPU's life). An uncorrectable error this boot is DCGM's ISOLATE (`DCGM_FR_VOLATILE_DBE_DETECTED`):
drain for a reset, and the CUDA out-of-memory the job raised beside it is the symptom. Errors of an
earlier boot, corrected ones, and memory sizes keyed `Total` decide nothing. Lines are synthetic,
in the layouts nvidia-smi prints (A100 and later; before A100, Single Bit / Double Bit blocks).
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures.derived import derived_signatures
from goodput.models import Category, CulpritKind

OOM = "RuntimeError: CUDA error: out of memory"


def a100(volatile: int, aggregate: int, *, bus: str = "00000000:3B:00.0") -> list[str]:
    return [f"GPU {bus}", "    Product Name                          : NVIDIA A100-SXM4-80GB",
            "    FB Memory Usage", "        Total                             : 81920 MiB",
            "    ECC Errors", "        Volatile",
            "            SRAM Correctable              : 0", "            SRAM Uncorrectable Parity     : 0",
            "            SRAM Uncorrectable SEC-DED    : 0", "            DRAM Correctable              : 12",
            f"            DRAM Uncorrectable            : {volatile}", "        Aggregate",
            "            SRAM Correctable              : 0", "            SRAM Uncorrectable Parity     : 0",
            "            SRAM Uncorrectable SEC-DED    : 0", "            DRAM Correctable              : 177",
            f"            DRAM Uncorrectable            : {aggregate}",
            "            SRAM Threshold Exceeded       : No"]


def volta(single: int, double: int) -> list[str]:
    block = ["                Device Memory             : {n}", "                Register File             : 0",
             "                L1 Cache                  : 0", "                L2 Cache                  : 0",
             "                Texture Memory            : N/A", "                Total                     : {n}"]
    return ["GPU 00000000:06:00.0", "    Product Name                          : Tesla V100-SXM2-16GB",
            "    ECC Errors", "        Volatile", "            Single Bit",
            *(line.format(n=single) for line in block), "            Double Bit",
            *(line.format(n=double) for line in block), "        Aggregate", "            Single Bit",
            *(line.format(n=single) for line in block), "            Double Bit",
            *(line.format(n=double) for line in block)]


def test_a_volatile_uncorrectable_error_convicts_that_gpu_and_the_oom_is_its_symptom() -> None:
    verdict = classify_lines([OOM, "$ nvidia-smi -q", "Attached GPUs : 2", *a100(0, 4),
                              *a100(2, 2, bus="00000000:5E:00.0")])
    assert (verdict.category, verdict.drain, verdict.restart) == (Category.GPU_HARDWARE, True, True)
    assert verdict.culprit_kind is CulpritKind.GPU and verdict.gpu == "00000000:5E:00.0"  # not 3B: an earlier boot's
    assert verdict.signatures[0] == "smi-q-volatile-uncorrectable-ecc"


@pytest.mark.parametrize("section", [a100(0, 4), a100(0, 0), volta(7, 0)],
                         ids=["aggregate-only", "clean", "corrected-only"])
def test_counts_of_an_earlier_boot_or_corrected_errors_leave_the_oom_to_the_job(section: list[str]) -> None:
    verdict = classify_lines([OOM, *section])
    assert "smi-q-volatile-uncorrectable-ecc" not in verdict.signatures
    assert verdict.category is Category.OOM and not verdict.drain


def test_before_a100_the_double_bit_total_decides() -> None:
    verdict = classify_lines([OOM, *volta(0, 1)])
    assert verdict.drain and verdict.gpu == "00000000:06:00.0"


def test_a_count_outside_the_ecc_section_or_before_any_gpu_is_no_count() -> None:
    # A `Total` under FB memory with no unit (a hand-trimmed paste) comes before any Volatile line.
    lines = [OOM, "GPU 00000000:3B:00.0", "    FB Memory Usage", "        Total : 81920",
             "        DRAM Uncorrectable : 3"]
    assert not classify_lines(lines).drain


def test_the_reading_is_known_to_the_catalogue_as_a_derived_signature() -> None:
    assert "smi-q-volatile-uncorrectable-ecc" in {sig.id for sig in derived_signatures()}
