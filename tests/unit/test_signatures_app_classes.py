"""Application, host-memory, shared-memory and object-storage classes of issue #25, over small logs.

Each row is the smallest log, in the vendor's documented message format, that exercises one class
rule, with the decision the class calls for; the look-alike rows are lines the rules must leave alone.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.models import Category, CulpritKind

CAT = default_catalogue()
NCCL = "gpu-a7:41557:41557 [0] "

# (name, log, category, culprit kind, drain, restart)
CASES: list[tuple[str, list[str], Category, CulpritKind, bool, bool]] = [
    # A traceback a log collector or a launcher indented keeps its meaning (Python docs, traceback).
    ("indented-exception-line", [
        '    File "/usr/lib/python3.9/site-packages/torch_xla/core/xla_model.py", line 200, in set_replication',
        "    RuntimeError: Cannot replicate if number of devices (1) is different from 8"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    ("indented-dotted-exception", ["\tjax.errors.JaxRuntimeError: INVALID_ARGUMENT: sharding mismatch"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    # NCCL's own argument and usage checks: ncclInvalidUsage / ncclInvalidArgument, a programming error.
    ("nccl-duplicate-gpu", [NCCL + "init.cc:497 NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both on "
                                   "CUDA device 1000", NCCL + "NCCL INFO init.cc:867 -> 5"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    ("nccl-invalid-rank", [NCCL + "init.cc:981 NCCL WARN Invalid rank requested : 2/2"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    ("nccl-mismatched-collective", [
        "init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around "
        "rank 39. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    # A CUDA call inside NCCL failed with code 2 (out of memory): NCCL returns ncclUnhandledCudaError,
    # which says nothing about the GPU's health here.
    ("nccl-cuda-failure-2-out-of-memory", [
        NCCL + "enqueue.cc:1556 NCCL WARN Cuda failure 2 'out of memory'",
        "cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_UNHANDLED_CUDA_ERROR: unhandled cuda error"],
     Category.OOM, CulpritKind.APP, False, False),
    # /dev/shm exhausted by PyTorch's shared-memory tensors: the container's setting, not storage.
    ("torch-shm-file-enospc", [
        "RuntimeError: unable to write to file </torch_18693_1954506624_0>: No space left on device (28)"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    # Host memory.
    ("ray-oom-worker-summary", [
        "(raylet) [2023-03-23 09:13:44,870 E 1432 1432] (raylet) node_manager.cc:3097: 1 Workers (tasks / actors) "
        "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 2c82620270df6b9d, "
        "IP: 172.31.183.172) over the last time period."],
     Category.OOM, CulpritKind.APP, False, False),
    ("xla-resource-exhausted", [
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
        "17179869184 bytes."],
     Category.OOM, CulpritKind.APP, False, False),
    # Object storage: the SDK gave up after its own retries on an error it documents as transient.
    ("s3-network-connection", [
        "OSError: When getting information for key 'ckpt/.validate' in bucket 'runs': AWS Error NETWORK_CONNECTION "
        "during HeadObject operation: curlCode: 43, A libcurl function was given a bad argument"],
     Category.STORAGE, CulpritKind.STORAGE, False, True),
    # Ray's autoscaler: no node type of the cluster can ever satisfy the request (infeasible).
    ("ray-infeasible-request", [
        "(autoscaler +7s) Error: No available node types can fulfill resource request {'GPU': 1.0}. Add suitable "
        "node types to this cluster to resolve this issue."],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    # Megatron refuses a checkpoint whose scheduler state differs from the command line (unless told to
    # override it): the run's configuration, deterministic. Old releases print `checkpointvalue`.
    ("megatron-scheduler-mismatch", [
        "AnnealingLR: class input value 1e-05 and checkpointvalue 3e-05 for learning rate do not match"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    ("megatron-param-scheduler-mismatch", [
        " 0: AssertionError: OptimizerParamScheduler: class input value 0.0001 and checkpoint value 0.0003 for "
        "learning rate do not match"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    # Look-alikes that must stay benign.
    ("ray-zero-oom-kills", [
        "(raylet) 0 Workers (tasks / actors) killed due to memory pressure (OOM), 3 Workers crashed due to other "
        "reasons at node (ID: 2c82620270df6b9d, IP: 10.0.0.5) over the last time period."],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("nccl-other-cuda-failure-is-not-oom", [NCCL + "NCCL WARN Cuda failure 700 'an illegal memory access'"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("indented-prose-is-not-an-exception", ["    Error handling: see the docs", "    raise ValueError(msg)"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("s3-access-denied-is-not-transient", [
        "OSError: When reading information for key 'x' in bucket 'b': AWS Error ACCESS_DENIED during HeadObject "
        "operation: No response body."],
     Category.APP_ERROR, CulpritKind.APP, False, False),
]


@pytest.mark.parametrize(("name", "log", "category", "kind", "drain", "restart"), CASES, ids=[c[0] for c in CASES])
def test_class(name: str, log: list[str], category: Category, kind: CulpritKind, drain: bool, restart: bool) -> None:
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.drain, v.restart) == (category, kind, drain, restart), v.explanation


def test_the_mismatched_collective_names_the_rank_nccl_points_at() -> None:
    v = classify_lines(["init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls "
                        "at and around rank 39. You can use NCCL_DEBUG=INFO"])
    assert v.rank == 39


def test_new_rules_cite_their_documented_source() -> None:
    for sig_id in ("nccl-usage-check", "ray-oom-summary", "xla-resource-exhausted", "object-store-transient",
                   "ray-infeasible-request"):
        sig = CAT.get(sig_id)
        assert sig is not None, sig_id
        assert sig.source, sig_id
        assert not sig.drain, sig_id
