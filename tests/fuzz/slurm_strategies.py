"""What the hostile-Slurm-output suites share (test_fuzz_slurm_scontrol, _json, _hostlists): the
recorded fixtures they start from, the hostile numbers any field may be given, and the digit runs
mutations replace, so the three files mutate Slurm's output one way."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def fixture_lines(*names: str) -> list[str]:
    return [line for name in names for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


numbers = st.one_of(st.integers(0, 10**6).map(str), st.integers(0, 2**64).map(str),
                    st.integers(19, 6000).map(lambda n: "9" * n),
                    st.sampled_from(["-1", "0x1f", "\u0663", "\u00b2", "1e308", "NaN", "00000", ""]))
DIGITS = re.compile(r"[0-9]+")
