"""The NVML collector against a fake module with pynvml's names, constants and error classes.

The fake borrows the real pynvml's constants and NVMLError hierarchy, so an error raised here is
exactly what the driver bindings would raise; only the ctypes calls are replaced.
"""

from __future__ import annotations

import importlib.util
import json
import queue
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from activities.adapters.gpu_nvml import NvmlCollector, NvmlGpuProbe, NvmlUnavailableError
from goodput.detect.gpu import GpuProbe, GpuRecoveryAction, GpuSample
from goodput.detect.gpu_rules import evaluate
from goodput.models import Category

NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


@dataclass
class FakeDevice:
    index: int
    util: int = 98
    sm_clock: int = 1980
    max_sm_clock: int = 1980
    power_mw: int = 690_123
    temperature: int = 54
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)
    retired: dict[int, list[int]] = field(default_factory=dict)
    pages_pending: int = 0
    rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    reasons: int = 0
    recovery: int = 0
    fail: dict[str, int] = field(default_factory=dict)
    lost: bool = False
    events_supported: bool = True
    pcie_replays: int = 0
    links: int = 18  # NVLinks present; 0 for a PCIe card
    nvlink: dict[int, dict[int, int]] = field(default_factory=dict)  # link -> counter -> count
    links_down: tuple[int, ...] = ()

    @property
    def uuid(self) -> str:
        return f"GPU-0000{self.index}-aaaa-bbbb-cccc-dddddddddddd"


class FakeNvml:
    """pynvml's surface, minus the driver."""

    def __init__(self, devices: list[FakeDevice], *, init_error: int | None = None) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "nvmlEventType", "nvmlClocks")):
                setattr(self, name, getattr(pynvml, name))
        self.devices = devices
        self.init_error = init_error
        self.events: queue.Queue[Any] = queue.Queue()
        self.registered: list[int] = []
        self.calls: list[str] = []

    def _check(self, name: str, handle: FakeDevice) -> FakeDevice:
        self.calls.append(name)
        if handle.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if name in handle.fail:
            raise pynvml.NVMLError(handle.fail[name])
        return handle

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.124.06"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        device = self.devices[index]
        if "handle" in device.fail:
            raise pynvml.NVMLError(device.fail["handle"])
        return device

    def nvmlDeviceGetIndex(self, h: FakeDevice) -> int:
        return self._check("index", h).index

    def nvmlDeviceGetUUID(self, h: FakeDevice) -> str:
        return self._check("uuid", h).uuid

    def nvmlDeviceGetName(self, h: FakeDevice) -> str:
        self._check("name", h)
        return "NVIDIA H200"

    def nvmlDeviceGetPciInfo(self, h: FakeDevice) -> Any:
        self._check("pci", h)
        bus = f"00000000:{0x18 + 0x10 * h.index:02X}:00.0".encode()
        return SimpleNamespace(busId=bus, busIdLegacy=bus)

    def nvmlDeviceGetUtilizationRates(self, h: FakeDevice) -> Any:
        return SimpleNamespace(gpu=self._check("util", h).util, memory=41)

    def nvmlDeviceGetClockInfo(self, h: FakeDevice, clock: int) -> int:
        assert clock == pynvml.NVML_CLOCK_SM
        return self._check("clock", h).sm_clock

    def nvmlDeviceGetMaxClockInfo(self, h: FakeDevice, clock: int) -> int:
        assert clock == pynvml.NVML_CLOCK_SM
        return self._check("max_clock", h).max_sm_clock

    def nvmlDeviceGetPowerUsage(self, h: FakeDevice) -> int:
        return self._check("power", h).power_mw

    def nvmlDeviceGetTemperature(self, h: FakeDevice, sensor: int) -> int:
        return self._check("temperature", h).temperature

    def nvmlDeviceGetTotalEccErrors(self, h: FakeDevice, error_type: int, counter: int) -> int:
        return self._check("ecc", h).ecc.get((error_type, counter), 0)

    def nvmlDeviceGetRetiredPages(self, h: FakeDevice, cause: int) -> list[int]:
        return self._check("retired", h).retired.get(cause, [])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeDevice) -> int:
        return self._check("retired_pending", h).pages_pending

    def nvmlDeviceGetRemappedRows(self, h: FakeDevice) -> tuple[int, int, int, int]:
        return self._check("rows", h).rows

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeDevice) -> int:
        return self._check("reasons", h).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeDevice) -> int:
        return self._check("throttle", h).reasons

    def nvmlDeviceGetFieldValues(self, h: FakeDevice, ids: list[int]) -> list[Any]:
        assert ids == [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]
        self._check("fields", h)
        ret = h.fail.get("recovery", pynvml.NVML_SUCCESS)
        return [SimpleNamespace(fieldId=ids[0], nvmlReturn=ret, valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                                value=SimpleNamespace(uiVal=h.recovery))]

    def nvmlDeviceGetPcieReplayCounter(self, h: FakeDevice) -> int:
        return self._check("pcie_replay", h).pcie_replays

    def nvmlDeviceGetNvLinkState(self, h: FakeDevice, link: int) -> int:
        if link >= self._check("nvlink_state", h).links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT if h.links else NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_DISABLED if link in h.links_down else pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, h: FakeDevice, link: int, counter: int) -> int:
        assert link < self._check("nvlink_errors", h).links and link not in h.links_down
        return h.nvlink.get(link, {}).get(counter, 0)

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlEventSetFree(self, event_set: object) -> None:
        self.calls.append("nvmlEventSetFree")

    def nvmlDeviceRegisterEvents(self, h: FakeDevice, types: int, event_set: object) -> None:
        assert types == pynvml.nvmlEventTypeXidCriticalError
        if not h.events_supported:
            raise pynvml.NVMLError_NotSupported()
        self.registered.append(h.index)

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Any:
        try:
            return self.events.get(timeout=timeout_ms / 1000) if timeout_ms else self.events.get_nowait()
        except queue.Empty:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None

    def xid(self, index: int, code: int) -> None:
        self.events.put(SimpleNamespace(device=self.devices[index],
                                        eventType=pynvml.nvmlEventTypeXidCriticalError,
                                        eventData=code, gpuInstanceId=0, computeInstanceId=0))


def collector(nvml: FakeNvml) -> NvmlCollector:
    return NvmlCollector(nvml, node="gpu-node17", clock=lambda: NOW)


def test_healthy_gpus_have_every_field() -> None:
    nvml = FakeNvml([FakeDevice(i) for i in range(8)])
    with collector(nvml) as nv:
        samples = nv.sample()
        assert nv.driver_version() == "570.124.06"
    assert len(samples) == 8
    s = samples[3]
    assert (s.index, s.node, s.name, s.observed_at) == (3, "gpu-node17", "NVIDIA H200", NOW)
    assert s.uuid == "GPU-00003-aaaa-bbbb-cccc-dddddddddddd" and s.pci_bus_id == "0000:48:00.0"
    assert (s.utilisation_pct, s.memory_utilisation_pct, s.sm_clock_mhz) == (98.0, 41.0, 1980.0)
    assert s.max_sm_clock_mhz == 1980.0  # what the GPU feed reports a slow clock against
    assert s.power_w == pytest.approx(690.123) and s.temperature_c == 54.0
    assert (s.ecc_volatile_uncorrected, s.ecc_aggregate_corrected, s.retired_pages_dbe) == (0, 0, 0)
    assert (s.row_remap_pending, s.row_remap_failure, s.retired_pages_pending) == (False, False, False)
    assert s.clock_event_reasons == () and s.recovery_action is GpuRecoveryAction.NONE
    assert s.errors == () and not s.gpu_lost
    assert evaluate(samples) == []
    assert nvml.calls[-2:] == ["nvmlEventSetFree", "nvmlShutdown"]


def test_pcie_replays_and_nvlink_errors_are_read_per_gpu() -> None:
    replay, crc = pynvml.NVML_NVLINK_ERROR_DL_REPLAY, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
    recovery = pynvml.NVML_NVLINK_ERROR_DL_RECOVERY
    erring = FakeDevice(0, pcie_replays=12, nvlink={3: {replay: 5, crc: 2}, 7: {recovery: 1}, 9: {replay: 100}},
                        links_down=(9,))
    nvml = FakeNvml([erring, FakeDevice(1, links=0), FakeDevice(2, fail={"pcie_replay": NOT_SUPPORTED})])
    with collector(nvml) as nv:
        first = nv.sample()
        calls = len(nvml.calls)
        nv.sample()
    a, pcie_card, refusing = first
    assert a.pcie_replay_count == 12 and a.nvlink_error_count == 8  # a link that is down is not read
    assert pcie_card.pcie_replay_count == 0 and pcie_card.nvlink_error_count is None
    assert not any(e.startswith("nvlink") for e in pcie_card.errors)  # no NVLink is no error
    assert refusing.pcie_replay_count is None and refusing.errors[0].startswith("pcie_replay:")
    # Which links a GPU has is learnt once: later samples ask only those.
    assert nvml.calls[calls:].count("nvlink_state") == 18 + 18


def test_each_refused_field_is_none_and_named_the_rest_survive() -> None:
    refusing = FakeDevice(1, fail={"power": NOT_SUPPORTED, "retired": NOT_SUPPORTED,
                                   "retired_pending": NOT_SUPPORTED, "recovery": NOT_SUPPORTED,
                                   "temperature": pynvml.NVML_ERROR_NO_PERMISSION})
    with collector(FakeNvml([FakeDevice(0), refusing])) as nv:
        s = nv.sample()[1]
    assert s.power_w is None and s.retired_pages_sbe is None and s.retired_pages_pending is None
    assert s.recovery_action is None and s.temperature_c is None
    assert s.sm_clock_mhz == 1980.0 and s.ecc_volatile_uncorrected == 0 and s.uuid
    assert "power: Not Supported" in s.errors and "temperature: Insufficient Permissions" in s.errors
    assert len(s.errors) == 6  # retired pages: one each for SBE and DBE


def test_hardware_faults_are_read_and_judged() -> None:
    bad = FakeDevice(
        5, ecc={(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): 2},
        rows=(3, 1, 0, 1),
        reasons=pynvml.nvmlClocksEventReasonHwSlowdown | pynvml.nvmlClocksEventReasonSwPowerCap,
        recovery=pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET)
    with collector(FakeNvml([FakeDevice(i) for i in range(5)] + [bad])) as nv:
        samples = nv.sample()
    s = samples[5]
    assert s.ecc_volatile_uncorrected == 2 and s.remapped_rows_uncorrectable == 1 and s.row_remap_failure
    assert s.clock_event_reasons == ("sw-power-cap", "hw-slowdown") and s.clock_event_mask == 0xC
    assert s.recovery_action is GpuRecoveryAction.GPU_RESET
    rules = {f.rule for f in evaluate(samples)}
    assert rules == {"ecc-uncorrectable", "row-remap-failure", "recovery-action", "clock-slowdown"}


def test_a_lost_gpu_still_yields_a_named_sample() -> None:
    devices = [FakeDevice(i) for i in range(4)]
    with collector(FakeNvml(devices)) as nv:
        devices[2].lost = True  # falls off the bus after open
        samples = nv.sample()
    lost = samples[2]
    assert lost.gpu_lost and lost.uuid == devices[2].uuid and lost.pci_bus_id == "0000:38:00.0"
    assert lost.utilisation_pct is None and lost.errors == ("utilisation: GPU is lost",)
    assert not samples[1].gpu_lost
    [finding] = [f for f in evaluate(samples) if f.rule == "gpu-lost"]
    assert finding.category is Category.GPU_HARDWARE and finding.uuid == devices[2].uuid


def test_a_gpu_that_needs_a_reset_is_flagged_and_found() -> None:
    """NVML_ERROR_RESET_REQUIRED on a query: the GPU is unusable until reset (NVML's reference), as
    the same code in a job's log is read (data/vendor/nvml-errors.toml)."""
    devices = [FakeDevice(0), FakeDevice(1, fail={"util": pynvml.NVML_ERROR_RESET_REQUIRED})]
    with collector(FakeNvml(devices)) as nv:
        samples = nv.sample()
    assert samples[1].gpu_reset_required and not samples[1].gpu_lost and not samples[0].gpu_reset_required
    assert samples[1].errors == ("utilisation: GPU requires restart",)
    [finding] = [f for f in evaluate(samples) if f.rule == "reset-required"]
    assert finding.uuid == devices[1].uuid and finding.category is Category.GPU_HARDWARE


def test_no_handle_for_an_index_is_a_lost_gpu_not_a_crash() -> None:
    devices = [FakeDevice(0), FakeDevice(1, fail={"handle": pynvml.NVML_ERROR_GPU_IS_LOST})]
    with collector(FakeNvml(devices)) as nv:
        samples = nv.sample()
    assert samples[1].gpu_lost and samples[1].index == 1 and samples[0].utilisation_pct == 98.0


def test_old_drivers_fall_back_to_throttle_reasons() -> None:
    device = FakeDevice(0, reasons=pynvml.nvmlClocksThrottleReasonHwThermalSlowdown,
                        fail={"reasons": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})
    with collector(FakeNvml([device])) as nv:
        assert nv.sample()[0].clock_event_reasons == ("hw-thermal-slowdown",)


def test_init_failure_is_one_clear_error() -> None:
    with pytest.raises(NvmlUnavailableError, match="Driver Not Loaded"):
        collector(FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).open()
    with pytest.raises(NvmlUnavailableError, match="open"):
        collector(FakeNvml([])).sample()


def test_the_real_pynvml_module_without_a_driver() -> None:
    nv = NvmlCollector(node="here")  # the real module; this machine may or may not have a GPU
    try:
        nv.open()
    except NvmlUnavailableError as err:
        assert "NVML" in str(err)
        return
    try:
        assert all(s.uuid for s in nv.sample())
    finally:
        nv.close()


@pytest.mark.timeout(10)
def test_xid_events_wait_drain_and_ride_on_the_next_sample() -> None:
    nvml = FakeNvml([FakeDevice(i) for i in range(8)])
    with collector(nvml) as nv:
        assert nvml.registered == list(range(8))
        assert nv.poll_xid_events(0) == []
        threading.Timer(0.05, nvml.xid, (3, 79)).start()
        [event] = nv.poll_xid_events(5000)  # woken by the event, not by the timeout
        assert (event.code, event.gpu_index, event.node, event.source) == (79, 3, "gpu-node17", "nvml")
        assert event.pci_bus_id == "0000:48:00.0" and event.uuid == nvml.devices[3].uuid
        nvml.xid(3, 48)
        nvml.xid(6, 74)
        samples = nv.sample()  # drains without waiting
        assert [e.code for e in samples[3].xid_events] == [79, 48]
        assert [e.code for e in samples[6].xid_events] == [74]
        assert all(not s.xid_events for s in nv.sample())
    categories = {(f.rule, f.category) for f in evaluate(samples)}
    assert {("xid-79", Category.GPU_HARDWARE), ("xid-74", Category.NVLINK)} <= categories


@pytest.mark.timeout(10)
def test_sampling_while_another_thread_waits_for_xids() -> None:
    nvml = FakeNvml([FakeDevice(i) for i in range(2)])
    with collector(nvml) as nv:
        found: list[Any] = []
        waiter = threading.Thread(target=lambda: found.extend(nv.poll_xid_events(5000)))
        waiter.start()
        while not nv._waiting.locked():  # the waiter is inside nvmlEventSetWait_v2
            threading.Event().wait(0.001)
        assert all(not s.xid_events for s in nv.sample())  # does not queue behind the waiter
        nvml.xid(0, 79)
        waiter.join(timeout=5)
        assert [e.code for e in found] == [79]
        assert [e.code for e in nv.sample()[0].xid_events] == [79]


def test_gpus_without_event_support_are_skipped_and_noted() -> None:
    nvml = FakeNvml([FakeDevice(0), FakeDevice(1, events_supported=False)])
    with collector(nvml) as nv:
        assert nvml.registered == [0] and nv.event_errors == {1: "Not Supported"}
    nvml = FakeNvml([FakeDevice(0, events_supported=False)])
    with collector(nvml) as nv:
        assert nv.poll_xid_events(10) == []


async def test_async_probe_satisfies_the_protocol() -> None:
    nvml = FakeNvml([FakeDevice(i) for i in range(2)])
    with collector(nvml) as nv:
        probe = NvmlGpuProbe(nv)
        assert isinstance(probe, GpuProbe)
        assert len(await probe.sample()) == 2
        nvml.xid(1, 79)
        assert [e.code for e in await probe.poll_xid_events(1000)] == [79]


def _probe_script() -> Any:
    path = Path(__file__).resolve().parents[2] / "scripts" / "nvml_probe.py"
    spec = importlib.util.spec_from_file_location("nvml_probe_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probe_script_prints_one_json_sample_per_gpu(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    nvml = FakeNvml([FakeDevice(0), FakeDevice(1, fail={"power": NOT_SUPPORTED})])
    nvml.xid(1, 79)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert _probe_script().main(["--xid-wait-ms", "10"]) == 0
    out, err = capsys.readouterr()
    first, second = (json.loads(line) for line in out.splitlines())
    assert set(first) == set(GpuSample.model_fields) and first["uuid"] == nvml.devices[0].uuid
    assert second["power_w"] is None and second["errors"] == ["power: Not Supported"]
    assert [e["code"] for e in second["xid_events"]] == [79]
    summary = json.loads(err)
    assert summary["driver"] == "570.124.06" and summary["gpus"] == 2
    assert [e["code"] for e in summary["xid_events_seen"]] == [79]


def test_probe_script_without_nvml_exits_2(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert _probe_script().main([]) == 2
    assert "NVML Shared Library Not Found" in capsys.readouterr().err
