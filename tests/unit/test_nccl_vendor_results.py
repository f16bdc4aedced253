"""NCCL's result codes as data: every code in `data/vendor/nccl-results.toml` reaches the rule the
table names, with the table's decision, whether the log spells the code's name or NCCL's message."""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue

CAT = default_catalogue()
TABLE: dict[str, Any] = tomllib.loads(
    resources.files("goodput.diagnose.signatures").joinpath("data", "vendor", "nccl-results.toml").read_text("utf-8"))
RESULTS: list[dict[str, Any]] = TABLE["result"]
RULES = {r["signature"] for r in RESULTS if r["signature"]}
BY_MESSAGE = ("torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/"
              "ProcessGroupNCCL.cpp:1970, {message}, NCCL version 2.21.5")
BY_NAME = "h1:5971:6015 [4] NCCL WARN transport/net.cc:812 -> {name}"


def test_the_table_names_ncclresult_t_in_order() -> None:
    assert [r["code"] for r in RESULTS] == list(range(1, 8))
    assert TABLE["source"]["url"].startswith("https://github.com/NVIDIA/nccl")
    assert all(r["reason"] for r in RESULTS)


@pytest.mark.parametrize("result", RESULTS, ids=[r["name"] for r in RESULTS])
@pytest.mark.parametrize("form", [BY_MESSAGE, BY_NAME], ids=["message", "name"])
def test_every_nccl_result_code_gets_its_decision(result: dict[str, Any], form: str) -> None:
    line = form.format(message=result["message"], name=result["name"])
    nccl_rules = {m.signature.id for m in CAT.match_line(line, 1)} & RULES
    if not result["signature"]:
        assert nccl_rules == set(), f"{result['name']} is not a failure"
        return
    assert nccl_rules == {result["signature"]}
    v = classify_lines([line])
    assert (str(v.category), v.restart, v.drain) == (result["category"], result["restart"], result["drain"])
