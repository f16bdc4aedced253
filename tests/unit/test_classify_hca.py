"""What the node's kernel says about its HCA (the Linux mlx5 driver: events.c, health.c, cmd.c) and
its network filesystems (sunrpc, Lustre). A failing cable or module and a fatal HCA drain the node
whose kernel log it is; warnings, a firmware reset in progress and a recovery are reported only; the
HCA's PCI address is never taken for a GPU's. A filesystem that fails the I/O restarts the job and
drains nothing; one that waits decides nothing."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.models import Category, CulpritKind
from tests.unit.signature_cases import check_line_case

K = "Dec  5 10:00:01 gpu-b07 kernel: mlx5_core 0000:3b:00.0: "

HCA_LINES: list[tuple[str, str, dict[str, str]]] = [
    (K + "port_module:254:(pid 0): Port module event[error]: module 0, Cable error, Bad or shorted cable/module",
     "mlx5-module-cable-error", {"detail": "Bad or shorted cable/module"}),
    (K + "port_module:254:(pid 0): Port module event[error]: module 1, Cable error, Bus stuck (I2C or data "
     "shorted)", "mlx5-module-cable-error", {"detail": "Bus stuck (I2C or data shorted)"}),
    # Before v5.2: info level, no function prefix, no space before the parenthesis.
    ("mlx5_core 0000:3b:00.0: Port module event[error]: module 1, Cable error, Bus stuck(I2C or data shorted)",
     "mlx5-module-cable-error", {"detail": "Bus stuck(I2C or data shorted)"}),
    (K + "port_module:254:(pid 0): Port module event[error]: module 0, Cable error, High Temperature",
     "mlx5-module-cable-error", {"detail": "High Temperature"}),
    (K + "port_module:254:(pid 0): Port module event[error]: module 0, Cable error, One or more network ports have "
     "been powered down due to insufficient/unadvertised power on the PCIe slot", "mlx5-ports-powered-down", {}),
    (K + "mlx5_pcie_event:326:(pid 165): Detected insufficient power on the PCIe slot (27W).",
     "mlx5-slot-power-warning", {}),
    (K + "poll_health:800:(pid 0): Fatal error 1 detected", "mlx5-device-fatal", {}),
    (K + "poll_health:800:(pid 0): Fatal error 5 detected", "mlx5-device-fatal", {}),
    (K + "mlx5_health_try_recover:352:(pid 9): health recovery failed", "mlx5-device-fatal", {}),
    (K + "Driver is in error state. Unloading", "mlx5-device-fatal", {}),
    (K + "print_health_info:431:(pid 0): Cold reset is required", "mlx5-device-fatal", {}),
    (K + "poll_health:790:(pid 0): device's health compromised - reached miss count", "mlx5-health-info", {}),
    (K + "mlx5_health_try_recover:330:(pid 9): starting health recovery flow", "mlx5-health-info", {}),
    (K + "temp_warn:168:(pid 0): High temperature on sensors with bit set 0 1", "mlx5-health-info", {}),
    (K + "wait_func:1155:(pid 1967079): TEARDOWN_HCA(0x103) timeout. Will cause a leak of a command resource",
     "mlx5-firmware-unresponsive", {}),
    (K + "wait_func_handle_exec_timeout:1159:(pid 72061): cmd[0]: ACCESS_REG(0x805) No done completion",
     "mlx5-firmware-unresponsive", {}),
]


@pytest.mark.parametrize(("line", "sig_id", "groups"), HCA_LINES, ids=[f"{c[1]}-{i}" for i, c in enumerate(HCA_LINES)])
def test_hca_lines(line: str, sig_id: str, groups: dict[str, str]) -> None:
    check_line_case(line, sig_id, groups)


def test_a_bad_cable_drains_the_node_whose_kernel_log_it_is_and_names_no_gpu() -> None:
    v = classify_lines([HCA_LINES[0][0], "Dec  5 10:00:01 gpu-b07 kernel: mlx5_core 0000:3b:00.0 ibp59s0: Link down"])
    assert (v.category, v.culprit_kind, v.host, v.gpu, v.drain, v.restart) == (
        Category.NETWORK, CulpritKind.NODE, "gpu-b07", None, True, True)


def test_a_firmware_reset_in_progress_and_a_recovery_decide_nothing() -> None:
    v = classify_lines([K + "poll_health:800:(pid 0): Fatal error 3 detected", HCA_LINES[12][0],
                        K + "mlx5_health_try_recover:360:(pid 9): health recovery succeeded"])
    assert (v.category, v.drain, v.restart) == (Category.UNKNOWN, False, False)


def test_a_command_timeout_restarts_without_draining() -> None:
    v = classify_lines([HCA_LINES[14][0]])
    assert (v.category, v.drain, v.restart) == (Category.NETWORK, False, True)


@pytest.mark.parametrize("line", [
    K + "mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) failed, status bad operation(0x2), "
        "syndrome (0x305684), err(-22)",
    K + "wait_func_handle_exec_timeout:1159:(pid 72061): cmd[0]: ACCESS_REG(0x805) recovered after timeout",
    "mlx5_core 0000:3b:00.0: Port module event: module 0, Cable plugged",
    "RuntimeError: Fatal error 1 detected in the data pipeline",
    # The fatal phrases are read only after the mlx5 driver's own prefix.
    "ice 0000:17:00.0: Cold reset is required",
    "bnxt_en 0000:3b:00.0: health recovery failed",
])
def test_what_the_driver_does_not_call_a_fault_is_none(line: str) -> None:
    v = classify_lines([line])
    assert (v.drain, v.restart) == (False, False), v.signatures


def test_a_network_filesystem_that_fails_the_io_restarts_and_one_that_waits_decides_nothing() -> None:
    """Lustre and NFS say themselves whether the I/O in flight fails (eviction, a soft mount's
    timeout) or waits for the server; neither drains the compute node that saw it."""
    failed = classify_lines(["LustreError: 167-0: scratch-OST0004-osc-ffff9d6153c91000: This client was evicted by "
                             "scratch-OST0004; in progress operations using this service will fail.",
                             "OSError: [Errno 5] Input/output error: '/lustre/ckpt/step_1200/model.pt'"])
    assert (str(failed.category), failed.restart, failed.drain) == ("storage", True, False)
    waited = classify_lines(["gpu-b07 kernel: nfs: server nas01 not responding, still trying",
                             "gpu-b07 kernel: nfs: server nas01 OK"])
    assert (str(waited.category), waited.restart, waited.drain) == ("unknown", False, False)
