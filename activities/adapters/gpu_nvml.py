"""The NVML collector: `GpuSample`s and Xid events straight from the driver on a GPU node.

Every NVML query can fail on some GPU, driver or permission level (NotSupported for retired pages
on row-remapping GPUs, NoPermission in containers, GpuIsLost after an Xid 79), so each field is
read on its own and a refusal becomes None plus a line in `GpuSample.errors`; a lost GPU still
yields a sample (flagged `gpu_lost`, named from the identity cached at `open()`). The pynvml
module is injected so that tests drive this code with a fake module that has pynvml's names.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import socket
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from goodput.detect.gpu import (
    GpuRecoveryAction,
    GpuSample,
    XidEvent,
    decode_clock_event_reasons,
    normalize_pci_bus_id,
)

# pynvml's values, used when an older pynvml lacks the name.
_DEFAULTS: dict[str, int] = {
    "NVML_CLOCK_SM": 1, "NVML_TEMPERATURE_GPU": 0, "NVML_VOLATILE_ECC": 0, "NVML_AGGREGATE_ECC": 1,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS": 0,
    "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR": 1, "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_GPU_IS_LOST": 15, "NVML_ERROR_RESET_REQUIRED": 16, "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_SUCCESS": 0,
    "nvmlEventTypeXidCriticalError": 0x8,
    "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION": 230,
    "NVML_NVLINK_MAX_LINKS": 18, "NVML_FEATURE_ENABLED": 1, "NVML_NVLINK_ERROR_DL_REPLAY": 0,
    "NVML_NVLINK_ERROR_DL_RECOVERY": 1, "NVML_NVLINK_ERROR_DL_CRC_FLIT": 2, "NVML_NVLINK_ERROR_DL_CRC_DATA": 3,
}
# Every NVLink error NVML counts per link; their sum growing is a link going bad.
_NVLINK_COUNTERS = ("NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY", "NVML_NVLINK_ERROR_DL_CRC_FLIT",
                    "NVML_NVLINK_ERROR_DL_CRC_DATA")
MAX_EVENTS_PER_POLL = 256


class NvmlUnavailableError(RuntimeError):
    """NVML cannot be used at all here (no driver, no library, no GPUs visible)."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class NvmlCollector:
    """Synchronous and blocking, like NVML itself; `NvmlGpuProbe` puts it behind the async seam."""

    def __init__(self, nvml: Any | None = None, *, node: str | None = None, watch_xids: bool = True,
                 clock: Callable[[], datetime] = _utcnow) -> None:
        self._nvml: Any = nvml if nvml is not None else importlib.import_module("pynvml")
        self._node = node
        self._watch_xids = watch_xids
        self._clock = clock
        self._handles: dict[int, Any] = {}
        self._identity: dict[int, dict[str, Any]] = {}
        self._links: dict[int, tuple[int, ...]] = {}  # the NVLinks each GPU has, learnt on first read
        self._count = 0
        self._event_set: Any = None
        self.event_errors: dict[int, str] = {}
        self._pending: list[XidEvent] = []
        self._lock = threading.Lock()
        self._waiting = threading.Lock()  # one waiter on the event set at a time
        self._open = False

    def _const(self, name: str) -> int:
        return int(getattr(self._nvml, name, _DEFAULTS[name]))

    def _text(self, err: BaseException) -> str:
        try:
            return str(err) or type(err).__name__
        except Exception:  # pynvml's __str__ asks the library, which may be what failed
            return type(err).__name__

    def _is(self, err: BaseException, code: str) -> bool:
        return getattr(err, "value", None) == self._const(code)

    # -- lifecycle ------------------------------------------------------------------------

    def open(self) -> None:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            self._count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as err:
            raise NvmlUnavailableError(f"NVML unavailable: {self._text(err)}") from err
        self._open = True
        self._node = self._node or socket.gethostname()
        for index in range(self._count):
            self._handle(index)
        if self._watch_xids:
            self._register_events()

    def close(self) -> None:
        if not self._open:
            return
        nvml = self._nvml
        if self._event_set is not None:
            with contextlib.suppress(nvml.NVMLError):  # the driver reclaims it at shutdown anyway
                nvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
        self._open = False

    def __enter__(self) -> NvmlCollector:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def driver_version(self) -> str | None:
        try:
            return str(self._nvml.nvmlSystemGetDriverVersion())
        except self._nvml.NVMLError:
            return None

    # -- devices --------------------------------------------------------------------------

    def _handle(self, index: int) -> Any:
        if index in self._handles:
            return self._handles[index]
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError:
            return None
        self._handles[index] = handle
        ident = self._identity.setdefault(index, {})
        for key, call in (("uuid", nvml.nvmlDeviceGetUUID), ("name", nvml.nvmlDeviceGetName),
                          ("pci_bus_id", lambda h: _bus_id(nvml.nvmlDeviceGetPciInfo(h)))):
            try:
                ident[key] = _as_text(call(handle))
            except nvml.NVMLError:
                ident.setdefault(key, None)
        if ident.get("pci_bus_id"):
            ident["pci_bus_id"] = normalize_pci_bus_id(ident["pci_bus_id"])
        return handle

    def sample(self) -> list[GpuSample]:
        """One sample per GPU, with the Xid events seen since the previous `sample()`."""
        if not self._open:
            raise NvmlUnavailableError("NvmlCollector.open() was not called")
        if self._event_set is not None and self._waiting.acquire(blocking=False):
            try:
                self._wait_for_xids(0)
            finally:
                self._waiting.release()
        # else a poll_xid_events() in another thread is waiting; what it finds waits in _pending.
        with self._lock:
            pending, self._pending = self._pending, []
        now = self._clock()
        samples = []
        for index in range(self._count):
            fields = self._read_device(index)
            mine = tuple(e for e in pending if e.gpu_index == index)
            samples.append(GpuSample(index=index, node=self._node, observed_at=now, xid_events=mine,
                                     **self._identity.get(index, {}), **fields))
        return samples

    def _read_device(self, index: int) -> dict[str, Any]:
        nvml = self._nvml
        handle = self._handle(index)
        if handle is None:
            return {"gpu_lost": True, "errors": ("handle: no handle for this index",)}
        out: dict[str, Any] = {}
        errors: list[str] = []

        def read(label: str, call: Callable[..., Any], *args: Any) -> Any:
            if out.get("gpu_lost"):
                return None
            try:
                return call(*args)
            except nvml.NVMLError as err:
                errors.append(f"{label}: {self._text(err)}")
                if self._is(err, "NVML_ERROR_GPU_IS_LOST"):
                    out["gpu_lost"] = True
                elif self._is(err, "NVML_ERROR_RESET_REQUIRED"):
                    out["gpu_reset_required"] = True
                return None

        c = self._const
        util = read("utilisation", nvml.nvmlDeviceGetUtilizationRates, handle)
        if util is not None:
            out["utilisation_pct"], out["memory_utilisation_pct"] = float(util.gpu), float(util.memory)
        out["sm_clock_mhz"] = _num(read("sm_clock", nvml.nvmlDeviceGetClockInfo, handle, c("NVML_CLOCK_SM")))
        out["max_sm_clock_mhz"] = _num(read("max_sm_clock", nvml.nvmlDeviceGetMaxClockInfo, handle,
                                            c("NVML_CLOCK_SM")))
        milliwatts = read("power", nvml.nvmlDeviceGetPowerUsage, handle)
        out["power_w"] = milliwatts / 1000.0 if milliwatts is not None else None
        out["temperature_c"] = _num(read("temperature", nvml.nvmlDeviceGetTemperature, handle,
                                         c("NVML_TEMPERATURE_GPU")))
        out["pcie_replay_count"] = _int(read("pcie_replay", nvml.nvmlDeviceGetPcieReplayCounter, handle))
        out["nvlink_error_count"] = read("nvlink_errors", self._nvlink_errors, index, handle)
        for field, err_type, counter in (
                ("ecc_volatile_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
                ("ecc_volatile_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
                ("ecc_aggregate_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
                ("ecc_aggregate_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC")):
            out[field] = _int(read(field, nvml.nvmlDeviceGetTotalEccErrors, handle, c(err_type), c(counter)))
        for field, cause in (
                ("retired_pages_sbe", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
                ("retired_pages_dbe", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR")):
            pages = read(field, nvml.nvmlDeviceGetRetiredPages, handle, c(cause))
            out[field] = len(pages) if pages is not None else None
        pending = read("retired_pages_pending", nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        out["retired_pages_pending"] = bool(pending) if pending is not None else None
        rows = read("remapped_rows", nvml.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            correctable, uncorrectable, remap_pending, failure = rows
            out.update(remapped_rows_correctable=int(correctable),
                       remapped_rows_uncorrectable=int(uncorrectable),
                       row_remap_pending=bool(remap_pending), row_remap_failure=bool(failure))
        mask = read("clock_event_reasons", self._clock_reasons, handle)
        if mask is not None:
            out["clock_event_mask"] = int(mask)
            out["clock_event_reasons"] = decode_clock_event_reasons(int(mask))
        out["recovery_action"] = read("recovery_action", self._recovery_action, handle)
        out["errors"] = tuple(errors)
        return out

    def _nvlink_errors(self, index: int, handle: Any) -> int | None:
        """NVLink errors summed over the GPU's active links; None for a GPU without NVLink."""
        nvml = self._nvml
        links = self._links.get(index)
        if links is None:
            links = self._links[index] = tuple(
                link for link in range(self._const("NVML_NVLINK_MAX_LINKS")) if self._link_exists(handle, link))
        if not links:
            return None
        total = 0
        for link in links:
            if int(nvml.nvmlDeviceGetNvLinkState(handle, link)) != self._const("NVML_FEATURE_ENABLED"):
                continue  # a link that is down counts nothing more (and NVML refuses its counters)
            total += sum(int(nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, self._const(counter)))
                         for counter in _NVLINK_COUNTERS)
        return total

    def _link_exists(self, handle: Any, link: int) -> bool:
        try:
            self._nvml.nvmlDeviceGetNvLinkState(handle, link)
        except self._nvml.NVMLError as err:
            if self._is(err, "NVML_ERROR_GPU_IS_LOST"):
                raise
            return False
        return True

    def _clock_reasons(self, handle: Any) -> int:
        nvml = self._nvml
        legacy = nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # drivers before R535 only have this
        getter = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", legacy)
        try:
            return int(getter(handle))
        except nvml.NVMLError as err:
            if getter is legacy or not self._is(err, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                raise
        return int(legacy(handle))

    def _recovery_action(self, handle: Any) -> GpuRecoveryAction | None:
        nvml = self._nvml
        [value] = nvml.nvmlDeviceGetFieldValues(handle, [self._const("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION")])
        if int(value.nvmlReturn) != self._const("NVML_SUCCESS"):
            raise nvml.NVMLError(int(value.nvmlReturn))
        return GpuRecoveryAction.from_code(int(value.value.uiVal))

    # -- Xid events -----------------------------------------------------------------------

    def _register_events(self) -> None:
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as err:
            self.event_errors[-1] = self._text(err)
            return
        registered = 0
        for index, handle in self._handles.items():
            try:
                nvml.nvmlDeviceRegisterEvents(handle, self._const("nvmlEventTypeXidCriticalError"), event_set)
                registered += 1
            except nvml.NVMLError as err:
                self.event_errors[index] = self._text(err)
        if registered:
            self._event_set = event_set
        else:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(event_set)

    def poll_xid_events(self, timeout_ms: int) -> list[XidEvent]:
        """Wait up to `timeout_ms` for the first Xid, then take whatever else is queued."""
        if self._event_set is None:
            return []
        with self._waiting:
            return self._wait_for_xids(timeout_ms)

    def _wait_for_xids(self, timeout_ms: int) -> list[XidEvent]:
        nvml = self._nvml
        events: list[XidEvent] = []
        wait = max(0, timeout_ms)
        while len(events) < MAX_EVENTS_PER_POLL:
            try:
                data = nvml.nvmlEventSetWait_v2(self._event_set, wait)
            except nvml.NVMLError as err:
                if not self._is(err, "NVML_ERROR_TIMEOUT"):
                    self.event_errors[-1] = self._text(err)
                break
            wait = 0
            if int(data.eventType) & self._const("nvmlEventTypeXidCriticalError"):
                events.append(self._xid_event(data))
        with self._lock:
            self._pending.extend(events)
        return events

    def _xid_event(self, data: Any) -> XidEvent:
        nvml = self._nvml
        index = None
        try:
            index = int(nvml.nvmlDeviceGetIndex(data.device))
        except nvml.NVMLError:
            index = next((i for i, h in self._handles.items() if h is data.device), None)
        ident = self._identity.get(index, {}) if index is not None else {}
        return XidEvent(code=int(data.eventData), gpu_index=index, uuid=ident.get("uuid"),
                        pci_bus_id=ident.get("pci_bus_id"), node=self._node, source="nvml",
                        observed_at=self._clock())


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return text.strip("\x00").strip() or None


def _bus_id(info: Any) -> str | None:
    return _as_text(getattr(info, "busId", None)) or _as_text(getattr(info, "busIdLegacy", None))


def _num(value: Any) -> float | None:
    return float(value) if value is not None else None


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


class NvmlGpuProbe:
    """Implements `goodput.detect.gpu.GpuProbe`: the blocking collector, run in worker threads."""

    def __init__(self, collector: NvmlCollector) -> None:
        self._collector = collector

    async def sample(self) -> Sequence[GpuSample]:
        return await asyncio.to_thread(self._collector.sample)

    async def poll_xid_events(self, timeout_ms: int) -> Sequence[XidEvent]:
        return await asyncio.to_thread(self._collector.poll_xid_events, timeout_ms)
